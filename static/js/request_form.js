// The request form: show spot-only fields for spot billing, preview the share,
// and ask the API (POST /api/v1/requests/estimate/, with the session and its CSRF token) where the
// next scheduling pass would place the request, and its price per hour, as the user edits it.
(function () {
  "use strict";
  const form = document.getElementById("request-form");
  if (!form) return;
  const text = document.getElementById("estimate-text");
  const box = document.getElementById("estimate");
  const spotOnly = form.querySelector(".spot-only");
  const fill = document.getElementById("share-fill");
  const priceLines = document.getElementById("price-lines");
  const noCommand = document.getElementById("no-command-note");
  const teamSlugs = JSON.parse(document.getElementById("team-slugs").textContent);
  // Which form field an API field's error belongs to.
  const formField = {
    gpu_milli: "share", num_gpus: "share", gpu_memory_mib: "gpu_memory_gib",
    checkpoint_interval_s: "checkpoint_interval_min", max_duration_s: "max_duration_h",
  };
  function label(field) {
    const group = document.getElementById("field-" + field);
    const text = group && group.querySelector("label, .label");
    return text ? text.textContent.trim() : field;
  }

  function billing() {
    const checked = form.querySelector("input[name=billing_mode]:checked");
    return checked ? checked.value : "";
  }

  // The chosen share as the API takes it; each option carries it (portal.share.Share).
  function chosenShare() {
    const option = form.elements.share.selectedOptions[0];
    return option
      ? { gpu_milli: Number(option.dataset.gpuMilli), num_gpus: Number(option.dataset.numGpus) }
      : { gpu_milli: 0, num_gpus: 1 };
  }

  function refreshFields() {
    spotOnly.hidden = billing() !== "spot";
    const share = chosenShare();
    fill.style.width = share.gpu_milli / 10 + "%";
    fill.textContent = share.num_gpus > 1 ? share.num_gpus + " whole GPUs, one node" : "";
    noCommand.hidden = form.elements.command.value.trim() !== "";
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

  // The server words the estimate (summary) and the prices (price_lines): the page says what the API says.
  function showPrice(answer) {
    priceLines.replaceChildren.apply(priceLines, answer.price_lines.map(function (line) {
      const item = document.createElement("li");
      item.textContent = line;
      return item;
    }));
  }

  // Each refusal beside its field, in the field's own error spot (as the server renders them on
  // submit); the fields this estimate checked lose their earlier messages first.
  function showFieldErrors(checked, fields) {
    checked.forEach(function (name) {
      const group = document.getElementById("field-" + name);
      if (!group) return;
      group.classList.remove("has-error");
      group.querySelectorAll(".errorlist").forEach(function (list) { list.remove(); });
      group.querySelectorAll("[aria-invalid]").forEach(function (c) { c.removeAttribute("aria-invalid"); });
    });
    Object.entries(fields).forEach(function ([field, messages]) {
      const group = document.getElementById("field-" + (formField[field] || field));
      if (!group) return;
      const list = document.createElement("ul");
      list.className = "errorlist";
      [].concat(messages).forEach(function (message) {
        const item = document.createElement("li");
        item.textContent = message;
        list.appendChild(item);
      });
      group.classList.add("has-error");
      group.appendChild(list);
      group.querySelectorAll("input, select, textarea").forEach(function (c) { c.setAttribute("aria-invalid", "true"); });
    });
  }

  // The API's error envelope, {"error": {"code", "message", "fields": {field: [messages]}}}, in words:
  // each field's messages after its label; the message alone when no field is at fault.
  function problems(error) {
    const fields = Object.entries(error.fields || {});
    if (!fields.length) return [error.message];
    return fields.map(function ([field, messages]) {
      const name = formField[field] || field;
      const named = document.getElementById("field-" + name) ? label(name) + ": " : "";
      return named + [].concat(messages).join(" ");
    });
  }

  // Without an estimate the price still follows the share, pool and model (the page's own words).
  function refreshPrice() {
    const f = form.elements;
    const query = new URLSearchParams({ share: f.share.value, pool: f.pool.value, gpu_model: f.gpu_model.value });
    const mine = sequence;
    fetch(form.dataset.pricesUrl + "?" + query, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(function (answer) { if (mine === sequence) showPrice(answer); })
      .catch(function () { /* the next change asks again */ });
  }

  function render(ok, answer, checked) {
    const error = ok ? { fields: {} } : answer.error || { message: "The estimate was refused.", fields: {} };
    showFieldErrors(checked, error.fields || {});
    if (!ok) {
      show("problem", ["Not yet submittable: ", problems(error).join(" · ")]);
      refreshPrice();
      return;
    }
    showPrice(answer);
    show(answer.starts_now ? "now" : "wait", [answer.summary]);
  }

  function checkedValue(name) {
    const checked = form.querySelector("input[name=" + name + "]:checked");
    return checked ? checked.value : "";
  }

  // The form's fields in the API's units; a number that does not parse goes as typed, for the API to refuse.
  function body() {
    const f = form.elements;
    const share = chosenShare();
    const data = {
      team: teamSlugs[f.team.value] || "",
      name: f.name.value,
      task_type: checkedValue("task_type"),
      gpu_milli: share.gpu_milli,
      num_gpus: share.num_gpus,
      pool: f.pool.value,
      gpu_model: f.gpu_model.value,
      billing_mode: billing(),
      allow_on_demand_fallback: f.allow_on_demand_fallback.checked,
      priority: f.priority.value === "" ? 0 : Number(f.priority.value),
      command: f.command.value,
      workload_key: f.workload_key.value,
    };
    function scaled(field, value, factor) {
      if (value.trim() === "") return;
      const number = Number(value);
      data[field] = Number.isFinite(number) ? Math.round(number * factor) : value;
    }
    scaled("gpu_memory_mib", f.gpu_memory_gib.value, 1024);
    scaled("checkpoint_interval_s", f.checkpoint_interval_min.value, 60);
    scaled("max_duration_s", f.max_duration_h.value, 3600);
    return data;
  }

  let timer = null;
  let sequence = 0;
  function estimate() {
    const mine = ++sequence;
    const data = body();
    const checked = Object.keys(data).map(function (field) { return formField[field] || field; });
    fetch(form.dataset.estimateUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        Accept: "application/json",
        "Content-Type": "application/json",
        "X-CSRFToken": form.elements.csrfmiddlewaretoken.value,
      },
      body: JSON.stringify(data),
    })
      .then(function (response) {
        if (response.status !== 200 && response.status !== 400) throw new Error(response.statusText);
        return response.json().then(function (answer) { return [response.ok, answer]; });
      })
      .then(function ([ok, answer]) { if (mine === sequence) render(ok, answer, checked); })
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
