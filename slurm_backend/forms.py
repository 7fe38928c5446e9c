"""The operator's Slurm connection form: what slurm_backend.services.connect_pool takes."""

from django import forms

from infra.forms import ServiceErrorsMixin


class SlurmConnectionForm(ServiceErrorsMixin, forms.Form):
    url = forms.CharField(
        max_length=500,
        label="slurmrestd URL",
        help_text="unix:/path/to/rest.sock (rest_auth/local), or http(s)://host:6820 with a JWT.",
    )
    token = forms.CharField(
        max_length=4000,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        label="JWT",
        help_text="For http(s): scontrol token username=… lifespan=…. Left empty, the stored one stays.",
    )
    partition = forms.CharField(max_length=64, help_text="Its nodes become the pool's nodes.")
    output_dir = forms.CharField(
        max_length=500,
        label="Output directory",
        help_text="Where jobs write their output, on storage the Slurm nodes share with the portal.",
    )
    card_memory_mib = forms.IntegerField(
        min_value=1, initial=81920, label="Card memory (MiB)", help_text="Slurm's gres does not say it."
    )

    def connection(self) -> dict:
        """The cleaned fields as connect_pool takes them: an empty token keeps the stored one."""
        fields = dict(self.cleaned_data)
        if not fields["token"]:
            fields.pop("token")
        return fields
