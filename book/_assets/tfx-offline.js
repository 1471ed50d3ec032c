// Loaded between require.js and the ipywidgets HTML manager (embed-amd.js), so saved widgets render offline.
(function () {
  "use strict";
  // 1. The manager's modules load their icon fonts relative to their AMD module paths
  //    (@jupyter-widgets/...); point those paths at _static, where tools/prepare_book.py puts the fonts,
  //    instead of the page's own folder.
  var here = document.currentScript.src.replace(/\/[^/]*$/, "");
  window.require.config({paths: {"@jupyter-widgets": here, "@jupyter-widgets/html-manager/dist": here}});

  // 2. The manager typesets widget labels with the MathJax 2 API (MathJax.Hub.Queue); the page loads
  //    MathJax 3, which has no Hub and replaces window.MathJax (Sphinx's configuration object) when it
  //    starts. Give whatever window.MathJax is a Hub that forwards to MathJax 3, non-enumerable so that
  //    MathJax does not take it for a configuration section.
  var hub = {
    Queue: function (command) {
      var mj = window.MathJax;
      var element = command && command[2];
      if (mj && typeof mj.typesetPromise === "function") {
        mj.typesetPromise(element ? [element] : undefined).catch(function (e) { console.warn(e); });
      }
    }
  };
  function withHub(value) {
    if (value && typeof value === "object" && !("Hub" in value)) {
      Object.defineProperty(value, "Hub", {value: hub, enumerable: false, configurable: true});
    }
    return value;
  }
  var current = withHub(window.MathJax);
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    enumerable: true,
    get: function () { return current; },
    set: function (value) { current = withHub(value); }
  });
})();
