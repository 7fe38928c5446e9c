"""The GPU shares the portal offers (eighths of one card, or whole cards together on one node) and
how a share reads: the one wording for pages, the API and the estimate."""

from dataclasses import dataclass

from scheduler_app.constants import MILLI_PER_GPU


def share_label(gpu_milli: int, num_gpus: int) -> str:
    """'1/4 GPU', '0.3 GPU' or '2 GPUs': how people say it."""
    if num_gpus > 1:
        return f"{num_gpus} GPUs"
    if gpu_milli == MILLI_PER_GPU:
        return "1 GPU"
    if gpu_milli % (MILLI_PER_GPU // 8) == 0:
        eighths = gpu_milli // (MILLI_PER_GPU // 8)
        for denominator in (2, 4, 8):
            if eighths * denominator % 8 == 0:
                return f"{eighths * denominator // 8}/{denominator} GPU"
    return f"{gpu_milli / MILLI_PER_GPU:g} GPU"


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
