// pydata-sphinx-theme 0.17.1 puts a hidden copy of the ☰ (primary) and "On this page" (secondary)
// toggles in #pst-header, and both themes bind their handlers to the first `.primary-toggle` /
// `.secondary-toggle` in the document: the hidden copy. The visible buttons, in the article
// header, then do nothing on a phone (pydata/pydata-sphinx-theme#2451, sphinx-book-theme#988).
// Remove the hidden copies while the page is parsed, before the themes' scripts bind.
(function () {
  "use strict";
  var selector = "button.pst-navbar-icon.primary-toggle, button.pst-navbar-icon.secondary-toggle";
  function prune() {
    document.querySelectorAll(selector).forEach(function (b) {
      if (!b.closest(".bd-header-article")) { b.remove(); }
    });
  }
  var observer = new MutationObserver(prune);
  observer.observe(document, {childList: true, subtree: true});
  document.addEventListener("DOMContentLoaded", function () {
    prune();
    observer.disconnect();
  });

  // The two drawers are modal dialogs that the theme closes only on a tap on their backdrop, or on
  // Escape while the focus is inside them: a tap on an entry of "On this page" left it over three
  // quarters of the screen (issue 46). Close a drawer when one of its links is followed, and on
  // Escape wherever the focus is.
  var drawers = "#pst-primary-sidebar-modal, #pst-secondary-sidebar-modal";
  document.addEventListener("click", function (e) {
    var link = e.target.closest ? e.target.closest("a[href]") : null;
    var drawer = link ? link.closest(drawers) : null;
    if (drawer && drawer.open) { drawer.close(); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") { return; }
    document.querySelectorAll(drawers + ", dialog.tfx-zoom").forEach(function (d) {
      if (d.open) { d.close(); }
    });
  });

  // A figure drawn wider than the column shows shrunk (a 1,500-px figure at a quarter of its size
  // on a phone): a tap opens it at full size in a dialog that scrolls; a tap or Escape closes it.
  document.addEventListener("click", function (e) {
    var img = e.target.closest ? e.target.closest(".cell_output img, img.tfx-sw-picture") : null;
    if (!img || !img.naturalWidth || img.clientWidth >= 0.9 * img.naturalWidth) { return; }
    var dialog = document.createElement("dialog");
    dialog.className = "tfx-zoom";
    dialog.setAttribute("aria-label", img.alt || "figure at full size");
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    dialog.appendChild(big);
    dialog.addEventListener("click", function () { dialog.close(); });
    dialog.addEventListener("close", function () { dialog.remove(); });
    document.body.appendChild(dialog);
    dialog.showModal();
  });

  // A table in a .tfx-cards container (the Troubleshooting page) becomes one card per row on a
  // phone (tfx-book.css): each cell is labelled with its column's header.
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".tfx-cards table").forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (tr) {
        Array.prototype.forEach.call(tr.children, function (td, i) {
          td.setAttribute("data-label", heads[i] || "");
        });
      });
    });
  });
})();
