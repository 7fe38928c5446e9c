// The request form: show spot-only fields for spot billing, preview the share,
// and ask the server where the request would run, and its price per hour, as the user edits it.
(function () {
  "use strict";
  const form = document.getElementById("request-form");
  if (!form) return;
  const text = document.getElementById("estimate-text");
  const box = document.getElementById("estimate");
  const spotOnly = form.querySelector(".spot-only");
  const fill = document.getElementById("share-fill");
  const priceText = document.getElementById("price-text");
  const pricePools = document.getElementById("price-pools");
  function label(field) {
    const group = document.getElementById("field-" + field);
    const text = group && group.querySelector("label, .label");
    return text ? text.textContent.trim() : field;
  }

  function billing() {
    const checked = form.querySelector("input[name=billing_mode]:checked");
    return checked ? checked.value : "";
  }

  function refreshFields() {
    spotOnly.hidden = billing() !== "spot";
    const share = parseInt(form.elements.share.value, 10) || 0;
    fill.style.width = Math.min(share, 1000) / 10 + "%";
    fill.textContent = share > 1000 ? share / 1000 + " whole GPUs, one node" : "";
  }

  function show(kind, parts) {
    box.className = "card estimate estimate-" + kind;
    text.replaceChildren.apply(text, parts.map(function (part) {
      if (typeof part === "string") return document.createTextNode(part);
      const strong = document.createElement("strong");
      strong.textContent = part.strong;
      return strong;
    }));
  }

  // The server words the price (price_text): the page and this script say the same thing.
  function showPrice(answer) {
    if (!priceText || answer.price_text === undefined) return;
    priceText.textContent = answer.price_text;
    pricePools.textContent = answer.price_pools;
  }

  function render(answer) {
    showPrice(answer);
    if (!answer.ok) {
      const problems = Object.entries(answer.errors).map(function ([field, messages]) {
        const name = field === "__all__" ? "" : label(field) + ": ";
        return name + messages.join(" ");
      });
      show("problem", ["Not yet submittable. ", problems.join(" · ")]);
    } else if (answer.starts_now) {
      show("now", ["Would start now on ", { strong: answer.where }, "."]);
    } else {
      const when = answer.estimated_start_at ? new Date(answer.estimated_start_at).toLocaleString() : "unknown";
      show("wait", ["Would wait. Estimated start: ", { strong: when }, ". ", answer.reason]);
    }
  }

  let timer = null;
  let sequence = 0;
  function estimate() {
    const params = new URLSearchParams(new FormData(form));
    params.delete("csrfmiddlewaretoken");
    const mine = ++sequence;
    fetch(form.dataset.estimateUrl + "?" + params, { headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (answer) { if (mine === sequence) render(answer); })
      .catch(function () { show("problem", ["The estimate is unavailable right now."]); });
  }

  function changed() {
    refreshFields();
    clearTimeout(timer);
    timer = setTimeout(estimate, 300);
  }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  refreshFields();
  estimate();
})();
