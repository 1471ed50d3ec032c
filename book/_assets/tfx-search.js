// Search results with excerpts from the book's prose (issue 46). Sphinx cut each excerpt from the
// result's page, fetched when the result showed: from file:// a browser refuses every such fetch
// (about 70 console errors per query, and titles only), and over http the excerpt often came from
// an import line or the contents list, with its maths half-stripped TeX. tools/site.py writes the
// prose of every section, maths as plain text, to _static/tfx-excerpts.js, which only the search
// page loads; here Sphinx's fetch is turned off and each result gets its excerpt from that file.
(function () {
  "use strict";
  if (!window.tfxExcerpts || typeof DOCUMENTATION_OPTIONS === "undefined") { return; }
  DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;

  var WIDTH = 240;

  function terms() {
    var q = new URLSearchParams(window.location.search).get("q") || "";
    return q.toLowerCase().split(/\s+/).filter(function (t) { return t.length > 1; });
  }

  // The prose of the section a result links to when it holds one of the words, or else of the
  // page's section that holds most of them; "" when no prose holds any (a match in code only).
  function section(doc, anchor, words) {
    var best = "", bestScore = 0;
    (window.tfxExcerpts[doc] || []).forEach(function (s) {
      var text = s[2].toLowerCase(), score = 0;
      words.forEach(function (w) { if (text.indexOf(w) >= 0) { score += 1; } });
      if (score > 0 && anchor && s[0] === anchor) { score += words.length; }
      if (score > bestScore) { best = s[2]; bestScore = score; }
    });
    return best;
  }

  // An excerpt of about WIDTH characters around the first word found, the words marked.
  function excerpt(text, words) {
    var lower = text.toLowerCase(), at = -1;
    words.forEach(function (w) {
      var i = lower.indexOf(w);
      if (i >= 0 && (at < 0 || i < at)) { at = i; }
    });
    var start = Math.max((at < 0 ? 0 : at) - WIDTH / 2, 0);
    if (start > 0) { start = text.indexOf(" ", start) + 1 || start; }
    var cut = text.substr(start, WIDTH);
    var end = start + cut.length < text.length ? cut.lastIndexOf(" ") : -1;
    if (end > WIDTH / 2) { cut = cut.slice(0, end); }
    var p = document.createElement("p");
    p.className = "context";
    var shown = (start > 0 ? "… " : "") + cut + (start + cut.length < text.length ? " …" : "");
    var pattern = words.length ? new RegExp("(" + words.map(function (w) {
      return w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    }).join("|") + ")", "gi") : null;
    shown.split(pattern || /$^/).forEach(function (piece, i) {
      if (!piece) { return; }
      if (i % 2 === 1) {
        var mark = p.appendChild(document.createElement("span"));
        mark.className = "highlighted";
        mark.textContent = piece;
      } else { p.appendChild(document.createTextNode(piece)); }
    });
    return p;
  }

  function annotate(li, words) {
    var link = li.querySelector("a[href]");
    if (!link || li.querySelector("p.context")) { return; }
    var href = link.getAttribute("href");
    var hash = href.indexOf("#");
    var anchor = hash >= 0 ? href.slice(hash + 1) : "";
    var doc = (hash >= 0 ? href.slice(0, hash) : href)
      .replace(DOCUMENTATION_OPTIONS.LINK_SUFFIX || ".html", "");
    var text = section(doc, anchor, words);
    if (text) { li.appendChild(excerpt(text, words)); }
  }

  function watch() {
    var results = document.getElementById("search-results");
    if (!results) { return; }
    var words = terms();
    new MutationObserver(function (changes) {
      changes.forEach(function (c) {
        c.addedNodes.forEach(function (n) {
          if (n.nodeName === "LI") { annotate(n, words); }
          else if (n.querySelectorAll) { n.querySelectorAll("li").forEach(function (li) { annotate(li, words); }); }
        });
      });
    }).observe(results, {childList: true, subtree: true});
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", watch); }
  else { watch(); }
})();
