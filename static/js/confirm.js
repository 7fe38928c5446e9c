// Forms with data-confirm ask before they submit (cancel, release, remove, revoke).
document.addEventListener("submit", function (event) {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
