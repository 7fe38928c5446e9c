"""Forget cached API tokens (teams.services.user_for_api_token) whenever a token or its user changes,
whichever path changed it: the pages, the API, the admin."""

from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from teams.models import ApiToken
from teams.services import forget_api_tokens


@receiver([post_save, post_delete], sender=ApiToken)
def forget_changed_token(sender, instance: ApiToken, **kwargs) -> None:
    forget_api_tokens([instance.token_hash])


@receiver([post_save, post_delete], sender=settings.AUTH_USER_MODEL)
def forget_tokens_of_changed_user(sender, instance, created=False, update_fields=None, **kwargs) -> None:
    if created or update_fields == frozenset({"last_login"}):  # a sign-in changes nothing tokens use
        return
    hashes = ApiToken.objects.filter(user_id=instance.pk).values_list("token_hash", flat=True)
    forget_api_tokens(list(hashes))
