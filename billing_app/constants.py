from decimal import Decimal

CURRENCY = "USD"
# PoolPrice.usd_per_gpu_hour is Decimal(max_digits=10, decimal_places=6).
PRICE_DECIMAL_PLACES = 6
PRICE_QUANTUM = Decimal("0.000001")
MAX_USD_PER_GPU_HOUR = Decimal("9999.999999")
CENT = Decimal("0.01")
# The public price data sits beside the repository (../shared), not in it; a clone without it
# simply has no public prices to start from.
PUBLIC_PRICES_RELATIVE_PATH = "../shared/prices/cloud_gpu_prices.csv"
# Ledger amounts keep 10 decimal places: a second of a 1/1000 share at 0.000001 USD/GPU-h still shows.
AMOUNT_QUANTUM = Decimal("0.0000000001")
DEFAULT_BUDGET_THRESHOLDS_PERCENT = (50, 80, 100)
