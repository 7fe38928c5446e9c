"""How the portal's forms render (settings.FORM_RENDERER): as Django's, except that a value typed into
a field is re-rendered at most as long as the field allows. Django sends bound data back as typed, so
a scripted 10 KB username came back whole in the login page's input."""

from django.forms.boundfield import BoundField
from django.forms.renderers import DjangoTemplates


class EchoLimitedBoundField(BoundField):
    def value(self):
        value = super().value()
        limit = getattr(self.field, "max_length", None)
        if limit and isinstance(value, str) and len(value) > limit:
            return value[:limit]
        return value


class PortalFormRenderer(DjangoTemplates):
    bound_field_class = EchoLimitedBoundField
