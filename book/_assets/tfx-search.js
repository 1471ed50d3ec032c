// Search results on the site (site review F13): Sphinx cuts each excerpt from the page's HTML, where
// the maths is still TeX source, so "\(QK^{\mathsf T}/\sqrt{d_k}\)" showed as written. Here an
// excerpt's maths loses its delimiters, its backslashes and its braces: "QK^T/sqrt d_k".
(function () {
  "use strict";

  function plainMaths(text) {
    return text.replace(/\\\(([\s\S]*?)\\\)|\\\[([\s\S]*?)\\\]|\$\$([\s\S]*?)\$\$/g,
      function (_, inline, display, dollars) {
        return (inline || display || dollars || "")
          .replace(/\\mathsf\s*\{?\s*T\s*\}?/g, "T")
          .replace(/\\([A-Za-z]+)/g, "$1 ")
          .replace(/[{}]/g, "")
          .replace(/\s+/g, " ")
          .trim();
      });
  }

  function patch() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search.tfxPlainMaths) { return; }
    var toText = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      return plainMaths(toText(htmlString, anchor));
    };
    Search.tfxPlainMaths = plainMaths;
  }

  patch();
  document.addEventListener("DOMContentLoaded", patch);
})();
