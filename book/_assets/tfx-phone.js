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
})();
