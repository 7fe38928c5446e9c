// Money as the pages say it (portal/money.py says it the same way on the server): US dollars with
// cents, more places only where the amount has them (at most four): "$4.775", "$3.00", "$0.0625".
(function () {
  "use strict";
  function usd(amount) {
    if (amount === null || amount === undefined || amount === "") return "—";
    const value = Number(amount);
    if (!Number.isFinite(value)) return String(amount);
    const [whole, places] = Math.abs(value).toFixed(4).split(".");
    const grouped = Number(whole).toLocaleString("en-US");
    return (value < 0 ? "-$" : "$") + grouped + "." + places.replace(/0{1,2}$/, "");
  }
  window.PortalFormat = { usd: usd };
})();
