"""The operator's Slurm page of a pool: connect it to a partition, change or drop the connection. Each
form calls one service of slurm_backend.services, which checks and logs it."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from scheduler_app.models import Pool
from scheduler_app.views.operator import staff_required
from slurm_backend.forms import SlurmConnectionForm
from slurm_backend.models import SlurmConnection
from slurm_backend.services import connect_pool, disconnect_pool


@staff_required
def pool_slurm(request, pk):
    pool = get_object_or_404(Pool, pk=pk)
    connection = SlurmConnection.objects.filter(pool=pool).first()
    initial = {}
    if connection is not None:
        fields = ("url", "partition", "output_dir", "card_memory_mib")
        initial = {name: getattr(connection, name) for name in fields}
    form = SlurmConnectionForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        with form.service_errors():
            _, problems = connect_pool(pool, actor=request.user, **form.connection())
            messages.success(
                request, f"Pool {pool.name} runs on Slurm partition {form.cleaned_data['partition']}."
            )
            for problem in problems:
                messages.warning(request, problem)
            return redirect("operator_pool_slurm", pk=pool.pk)
    context = {"pool": pool, "form": form, "connection": connection}
    return render(request, "portal/operator/pool_slurm.html", context, status=400 if form.errors else 200)


@staff_required
@require_POST
def pool_slurm_disconnect(request, pk):
    pool = get_object_or_404(Pool, pk=pk)
    try:
        disconnect_pool(pool, actor=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("operator_pool_slurm", pk=pool.pk)
    messages.success(request, f"Pool {pool.name} is run by its nodes' agents again.")
    return redirect("operator_pools")
