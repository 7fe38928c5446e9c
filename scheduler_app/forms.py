"""Forms of the scheduler's pages: a new request, and the operator's nodes, pools, quotas, Unix identities
and what-if scenarios."""

import datetime as dt
import re
from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone

from infra.echo import echoed
from infra.forms import ServiceErrorsMixin, UtcDateTimeField
from scheduler_app.choices import BillingMode, MigMode, NodeStatus, TaskType
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.placement import POLICIES
from scheduler_app.core.queueing import DEFAULT_POLICY
from scheduler_app.core.shares import Share
from scheduler_app.models import Gpu, Pool
from scheduler_app.whatif.replay import QUEUE_MODES
from teams.constants import UNIX_ACCOUNT_MAX_CHARS
from teams.models import Team

MIB_PER_GIB = 1024


class ShareSelect(forms.Select):
    """Each option carries its share per card and its card count, so the form's script does no arithmetic."""

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        share = Share.parse(value)
        option["attrs"].update({"data-gpu-milli": share.gpu_milli, "data-num-gpus": share.num_gpus})
        return option


class RequestForm(ServiceErrorsMixin, forms.Form):
    """What to run and on which share of which GPUs; units as people say them (GiB, minutes, hours)."""

    service_fields = {
        "gpu_milli": "share",
        "num_gpus": "share",
        "gpu_memory_mib": "gpu_memory_gib",
        "checkpoint_interval_s": "checkpoint_interval_min",
        "max_duration_s": "max_duration_h",
    }

    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=100, required=False, help_text="To recognise it in lists.")
    task_type = forms.ChoiceField(
        choices=TaskType.choices,
        initial=TaskType.TRAINING,
        widget=forms.RadioSelect,
        help_text="Training packs onto few cards; inference spreads out for isolation.",
    )
    share = forms.TypedChoiceField(
        choices=Share.choices,
        coerce=Share.parse,
        initial=250,
        widget=ShareSelect,
        label="GPU share",
        help_text="Eighths of one card, or whole cards together on one node.",
    )
    pool = forms.ChoiceField(required=False, label="Pool")
    gpu_model = forms.ChoiceField(required=False, label="GPU model")
    gpu_memory_gib = forms.IntegerField(
        required=False, label="GPU memory (GiB per card)", help_text="Empty: in proportion to the share."
    )
    billing_mode = forms.ChoiceField(
        choices=BillingMode.choices, initial=BillingMode.ON_DEMAND, widget=forms.RadioSelect, label="Billing"
    )
    allow_on_demand_fallback = forms.BooleanField(
        required=False, label="Fall back to on-demand when no spot capacity is free"
    )
    checkpoint_interval_min = forms.IntegerField(required=False, label="Checkpoint interval (minutes)")
    pinned = forms.BooleanField(
        required=False,
        label="Pinned: never move it to make room for other work",
        help_text="Work with a checkpoint interval may otherwise be moved at a checkpoint, at most once "
        "an hour.",
    )
    max_duration_h = forms.DecimalField(
        required=False, max_digits=6, decimal_places=2, label="Max duration (hours)"
    )
    priority = forms.IntegerField(initial=0, help_text="-100..100; higher goes first within your team.")
    command = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    environment = forms.CharField(
        required=False,
        strip=False,  # a value is the job's exactly, trailing spaces included
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        label="Environment (NAME=value, one per line)",
        help_text="Variables the job gets; they win over the team's secrets of the same name.",
    )
    workload_key = forms.CharField(
        required=False,
        max_length=200,
        label="Workload key",
        help_text="Runs with the same key teach the share recommendation; empty: the command.",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        teams = Team.objects.filter(memberships__user=user)
        self.fields["team"].queryset = teams
        if len(teams) == 1:
            self.fields["team"].initial = teams[0].pk
            self.fields["team"].widget = forms.HiddenInput()
        pools = list(Pool.objects.all())
        self.fields["pool"].choices = [("", "Any pool that matches the billing")] + [
            (p.name, f"{p.name} — {p.gpu_model}, {p.get_capacity_type_display().lower()}") for p in pools
        ]
        models = Gpu.objects.order_by("model").values_list("model", flat=True).distinct()
        self.fields["gpu_model"].choices = [("", "Any model")] + [(m, m) for m in models]
        limit = settings.SPOT_MAX_CHECKPOINT_INTERVAL_S // 60
        self.fields["checkpoint_interval_min"].help_text = f"Required for spot work: at most {limit} minutes."
        self.fields["checkpoint_interval_min"].widget.attrs["min"] = 1
        self.fields["priority"].widget.attrs.update(min=-100, max=100)

    def clean_environment(self) -> dict[str, str]:
        """NAME=value lines into {NAME: value}; the submit service checks the names and values."""
        environment: dict[str, str] = {}
        for line in self.cleaned_data["environment"].splitlines():
            if not line.strip():
                continue
            name, equals, value = line.partition("=")
            name = name.strip()
            if not equals or not name:
                raise ValidationError(f"“{echoed(line.strip())}”: write NAME=value, one variable per line.")
            if name in environment:
                raise ValidationError(f"{name} is given twice; keep one line for it.")
            environment[name] = value
        return environment

    def service_kwargs(self) -> dict:
        """The keyword arguments of submit_request / estimate_request, from the cleaned data."""
        data = self.cleaned_data
        share = data["share"]
        memory = data["gpu_memory_gib"]
        interval = data["checkpoint_interval_min"]
        duration = data["max_duration_h"]
        return {
            "team": data["team"],
            "pool_name": data["pool"],
            "name": data["name"].strip(),
            "task_type": data["task_type"],
            "gpu_milli": share.gpu_milli,
            "num_gpus": share.num_gpus,
            "gpu_model": data["gpu_model"],
            "gpu_memory_mib": None if memory is None else memory * MIB_PER_GIB,
            "billing_mode": data["billing_mode"],
            "allow_on_demand_fallback": data["allow_on_demand_fallback"],
            "checkpoint_interval_s": None if interval is None else interval * 60,
            "pinned": data["pinned"],
            "max_duration_s": None if duration is None else int(duration * Decimal(3600)),
            "priority": data["priority"],
            "command": data["command"],
            "environment": data["environment"],
            "workload_key": data["workload_key"].strip(),
        }


def unix_account_field(help_text: str) -> forms.CharField:
    """A Unix user name as typed (not stripped: a space is refused, not dropped); the service checks it."""
    return forms.CharField(
        max_length=UNIX_ACCOUNT_MAX_CHARS,
        required=False,
        strip=False,
        label="Unix account",
        help_text=help_text,
    )


class TeamUnixAccountForm(ServiceErrorsMixin, forms.Form):
    """Operators map a team's jobs to an existing Unix account; set_team_unix_account checks the name."""

    team = forms.ModelChoiceField(queryset=Team.objects.all())
    unix_account = unix_account_field("An existing account on the nodes; empty: the agent's own gpp-<slug>.")


class UserUnixAccountForm(ServiceErrorsMixin, forms.Form):
    """Operators map a user's jobs, in every team, to an existing Unix account."""

    username = forms.CharField(max_length=150, label="User")
    unix_account = unix_account_field("An existing account on the nodes; empty: the team's account.")

    def clean_username(self):
        username = self.cleaned_data["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise ValidationError(f"No user named {echoed(username)!r}.")
        return user


class NodeStatusForm(ServiceErrorsMixin, forms.Form):
    """Operators drain a node (no new work lands there) or put it back in service: undrain, or resume a
    lost, suspect or reclaimed one."""

    status = forms.ChoiceField(
        choices=[(NodeStatus.DRAINING, "Drain"), (NodeStatus.READY, "Ready (undrain, or resume)")],
        widget=forms.RadioSelect,
    )
    reason = forms.CharField(max_length=500, help_text="Kept in the audit log.")


class ReclaimForm(ServiceErrorsMixin, forms.Form):
    """Operators reclaim a spot node as its cloud would: its jobs checkpoint and stop within the grace."""

    grace_s = forms.IntegerField(
        min_value=0,
        max_value=24 * 3600,
        initial=120,
        label="Grace (seconds)",
        help_text="Its jobs checkpoint and stop by then; they are killed at the deadline.",
    )
    notice_id = forms.CharField(max_length=200, required=False, label="Notice id (optional)")


class MigLayoutForm(ServiceErrorsMixin, forms.Form):
    """Operators set one card's MIG layout; set_mig_layout checks it against the card's geometry."""

    gpu_index = forms.TypedChoiceField(coerce=int, label="Card")
    mig_layout = forms.CharField(
        max_length=200,
        required=False,
        label="MIG layout",
        help_text="GPU instances as profile@start memory slice, e.g. 3g.40gb@0,2g.20gb@4,1g.10gb@6; "
        "empty: none.",
    )

    def __init__(self, *args, node, **kwargs):
        super().__init__(*args, **kwargs)
        cards = node.gpus.order_by("index")
        self.fields["gpu_index"].choices = [
            (g.index, f"gpu{g.index} · {g.model} · {g.mig_layout or 'no instances'}") for g in cards
        ]


class PoolForm(ServiceErrorsMixin, forms.Form):
    description = forms.CharField(max_length=200, required=False)
    mig_mode = forms.ChoiceField(
        choices=MigMode.choices,
        required=False,
        label="MIG",
        help_text="In MIG mode work gets whole GPU instances: fixed layouts set per card on the node "
        "pages, or dynamic (the scheduler re-partitions idle cards). Only with no work on the pool.",
    )
    granularity_milli = forms.IntegerField(
        min_value=1,
        max_value=MILLI_PER_GPU,
        label="Granularity (milli-GPU)",
        help_text="Shares are rounded up to this step; 125 = eighths.",
    )
    consolidation = forms.BooleanField(
        required=False,
        label="Consolidation",
        help_text="Move running jobs with a checkpoint interval at their next checkpoint (at most once an "
        "hour each) to make room for a request that fits nowhere only because the free share is scattered.",
    )


class QuotaForm(ServiceErrorsMixin, forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.all())
    pool = forms.ModelChoiceField(queryset=Pool.objects.all())
    guaranteed_milli = forms.IntegerField(
        label="Guaranteed (milli-GPU)", help_text="1000 = one GPU; 0 removes the guarantee."
    )


class WhatIfForm(ServiceErrorsMixin, forms.Form):
    """The what-if's scenario as operators type it; whatif.replay.parse_scenario checks it (times in UTC)."""

    start = UtcDateTimeField(label="From (UTC)")
    end = UtcDateTimeField(label="To (UTC)")
    policy = forms.ChoiceField(label="Placement policy")
    queue = forms.ChoiceField(label="Queue", help_text="fair: fair share, quotas, backfill (today's).")
    quotas = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Quota overrides",
        help_text="One per line: team-slug pool milli-GPU, e.g. “vision a100-80gb 16000”.",
    )
    nodes = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        label="Node changes",
        help_text="One per line: pool and nodes to add (negative: remove), e.g. “rtx4090 +2”.",
    )
    target_p95_s = forms.IntegerField(
        required=False,
        min_value=1,
        label="Target p95 delay (s)",
        help_text="With a target, the cheapest node addition that meets it is recommended.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The next whole minute, so what was submitted this minute is in (the replay stops at now).
        end = (timezone.now() + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
        self.fields["start"].initial = end - dt.timedelta(days=7)
        self.fields["end"].initial = end
        self.fields["policy"].choices = [(name, name) for name in POLICIES]
        self.fields["policy"].initial = DEFAULT_POLICY
        self.fields["queue"].choices = [(name, name) for name in QUEUE_MODES]

    def clean_quotas(self) -> list[dict]:
        rows = []
        for line in _lines(self.cleaned_data["quotas"]):
            parts = line.split()
            if len(parts) != 3 or not parts[2].isdigit():
                raise ValidationError(
                    f"“{echoed(line)}”: write team-slug, pool and milli-GPU, e.g. “vision a100 8000”."
                )
            rows.append({"team": parts[0], "pool": parts[1], "guaranteed_milli": int(parts[2])})
        return rows

    def clean_nodes(self) -> dict[str, int]:
        changes = {}
        for line in _lines(self.cleaned_data["nodes"]):
            parts = line.split()
            if len(parts) != 2 or not re.fullmatch(r"[+-]?\d+", parts[1]):
                raise ValidationError(
                    f"“{echoed(line)}”: write a pool and a whole number of nodes, e.g. “a100 +2”."
                )
            changes[parts[0]] = int(parts[1])
        return changes

    def scenario(self) -> dict:
        """The scenario as the API takes it."""
        data = dict(self.cleaned_data)
        data["start"], data["end"] = data["start"].isoformat(), data["end"].isoformat()
        return data


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]
