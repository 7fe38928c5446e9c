"""What the apps' page forms share (each app's forms.py): they parse what people type into what the
services take.

The services validate (ranges, spot rules, who may act); a form only turns
text into values and attaches the service's ValidationError to its own fields,
so the message a user reads is the one the API gives.
"""

from contextlib import contextmanager

from django import forms
from django.core.exceptions import ValidationError

from infra.times import BadTime, in_range


class UtcDateTimeField(forms.DateTimeField):
    """A time typed in UTC, within the years the portal computes with (infra.times), as the API takes."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return in_range(moment)
        except BadTime as problem:
            raise ValidationError(problem.sentence(), code="invalid") from None


class ServiceErrorsMixin:
    """Attach a service's ValidationError to this form: its field names map through `service_fields`."""

    service_fields: dict[str, str] = {}

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for name, messages in error.message_dict.items():
            field = self.service_fields.get(name, name)
            self.add_error(field if field in self.fields else None, messages)

    @contextmanager
    def service_errors(self):
        """Put the ValidationError the block raises on this form, and go on after the block: a view calls
        the service and says it went through inside the block, and shows the form again after it."""
        try:
            yield
        except ValidationError as error:
            self.add_service_errors(error)

    def service_error_dict(self) -> dict[str, list[str]]:
        """The form's errors keyed by field ('__all__' for the rest), for JSON answers."""
        return {name: list(messages) for name, messages in self.errors.items()}
