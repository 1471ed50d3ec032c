// The Claims page (tools/claims.py): a search box and four selects filter the rows by their data
// attributes. The form stays hidden without this script, and then every row shows.
(function () {
  "use strict";
  function setup() {
    var form = document.querySelector(".tfx-claims-filters");
    if (!form) { return; }
    var rows = Array.prototype.slice.call(document.querySelectorAll(".tfx-claims-table tbody tr"));
    var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
    var count = form.querySelector(".tfx-claims-count");
    function apply() {
      var q = form.elements.q.value.trim().toLowerCase(), shown = 0;
      var id = /^[an]\d+$/.test(q);  // a claim id finds that claim only (A1, not A10-A19)
      rows.forEach(function (r) {
        var text = id ? r.id.replace(/^claims-/, "").replace(/-\d+$/, "") : r.textContent.toLowerCase();
        var ok = selects.every(function (s) { return !s.value || r.dataset[s.name] === s.value; }) &&
          (!q || (id ? text === q : text.indexOf(q) >= 0));
        r.hidden = !ok;
        shown += ok ? 1 : 0;
      });
      count.textContent = shown + " of " + rows.length + " rows";
    }
    form.addEventListener("input", apply);
    form.addEventListener("change", apply);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    form.hidden = false;
    apply();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", setup); }
  else { setup(); }
})();
