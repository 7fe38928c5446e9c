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
