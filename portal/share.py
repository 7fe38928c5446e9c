"""The GPU shares the portal offers: eighths of one card, or whole cards together on one node."""

from dataclasses import dataclass

from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.shares import share_label

EIGHTH_MILLI = MILLI_PER_GPU // 8
GANG_SIZES = (2, 4, 8)
OFFERED = "eighths of one card (125, 250 … 1000 milli-GPU) or 2, 4 or 8 whole cards (2000, 4000, 8000)"


@dataclass(frozen=True)
class Share:
    """`gpu_milli` milli-GPU on each of `num_gpus` cards, as the services take it; only offered shares
    can be made."""

    gpu_milli: int
    num_gpus: int = 1

    def __post_init__(self):
        eighths = range(EIGHTH_MILLI, MILLI_PER_GPU + 1, EIGHTH_MILLI)
        one_card = self.num_gpus == 1 and self.gpu_milli in eighths
        gang = self.num_gpus in GANG_SIZES and self.gpu_milli == MILLI_PER_GPU
        if not (one_card or gang):
            raise ValueError(
                f"{self.gpu_milli} milli-GPU on {self.num_gpus} card(s) is not a share the portal offers: "
                f"{OFFERED}."
            )

    @classmethod
    def offered(cls) -> list["Share"]:
        """Every share the portal offers, smallest first."""
        eighths = [cls(milli) for milli in range(EIGHTH_MILLI, MILLI_PER_GPU + 1, EIGHTH_MILLI)]
        return eighths + [cls(MILLI_PER_GPU, cards) for cards in GANG_SIZES]

    @classmethod
    def choices(cls) -> list[tuple[int, str]]:
        """(total milli-GPU, label) per offered share: the values a form sends."""
        return [(share.total_milli, share.label) for share in cls.offered()]

    @classmethod
    def parse(cls, choice: str | int) -> "Share":
        """The share a form's choice names (its total milli-GPU, "250" or "2000"); ValueError otherwise."""
        by_total = {str(share.total_milli): share for share in cls.offered()}
        share = by_total.get(choice.strip() if isinstance(choice, str) else str(choice))
        if share is None:
            raise ValueError(f"{choice!r} is not a share the portal offers: {OFFERED}.")
        return share

    @property
    def total_milli(self) -> int:
        return self.gpu_milli * self.num_gpus

    @property
    def label(self) -> str:
        """'1/4 GPU', '2 GPUs': the words of the API's estimate and the request pages."""
        return share_label(self.gpu_milli, self.num_gpus)
