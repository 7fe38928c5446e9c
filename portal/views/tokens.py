"""Personal API tokens: create (the secret is shown once, in the answer to the POST), list, revoke."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.forms import ApiTokenForm
from teams.services import create_api_token, revoke_api_token


@login_required
def token_index(request):
    form = ApiTokenForm(request.POST or None)
    token = secret = None
    if request.method == "POST" and form.is_valid():
        try:
            token, secret = create_api_token(request.user, **form.service_kwargs())
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            form = ApiTokenForm()
    context = {
        "form": form,
        "created": token,
        "secret": secret,
        "tokens": request.user.api_tokens.all(),
        "now": timezone.now(),
    }
    return render(request, "portal/tokens.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def token_revoke(request, pk):
    token = get_object_or_404(request.user.api_tokens, pk=pk)
    revoke_api_token(token, user=request.user)
    messages.success(request, f"Token {token.name} revoked; it no longer works.")
    return redirect("tokens")
