// The chapter widgets on the static site (tools/static_widgets.py): every setting of a widget's
// declared grid was computed at build time by the widget's own frame function; this script swaps the
// text and the picture when the reader moves a control. Controls stay disabled until it runs.
(function () {
  "use strict";

  function setup(root) {
    var data = (window.tfxStaticWidgets || {})[root.getAttribute("data-key")];
    if (!data) { return; }
    var text = root.querySelector(".tfx-sw-text");
    var picture = root.querySelector(".tfx-sw-picture");
    var controls = data.controls.map(function (i) {
      return root.querySelector("[data-control='" + i + "']");
    });
    var values = controls.map(function (el) { return JSON.parse(el.getAttribute("data-values")); });

    function get(k) {
      var el = controls[k];
      if (el.type === "checkbox") { return values[k].indexOf(el.checked); }
      if (el.getAttribute("role") === "group") {
        var on = el.querySelector("button[aria-pressed='true']");
        return on ? Number(on.getAttribute("data-index")) : 0;
      }
      return Number(el.value);
    }

    function set(k, i) {
      var el = controls[k];
      if (el.type === "checkbox") { el.checked = values[k][i] === true; }
      else if (el.getAttribute("role") === "group") {
        el.querySelectorAll("button").forEach(function (b) {
          b.setAttribute("aria-pressed", String(Number(b.getAttribute("data-index")) === i));
        });
      } else { el.value = String(i); }
      if (el.type === "range") {
        var shown = JSON.parse(el.getAttribute("data-readouts"))[i];
        el.setAttribute("aria-valuetext", shown);
        el.parentNode.querySelector("output").textContent = shown;
      }
    }

    function show(k) {
      var current = controls.map(function (_, j) { return get(j); });
      var key = current.join(",");
      if (!(key in data.settings)) {
        // not on the grid (a grid that moves one control at a time): the others go back to default
        current = data.defaults.slice();
        current[k] = get(k);
        key = current.join(",");
        if (!(key in data.settings)) {  // not a stop at all: everything back to the defaults
          current = data.defaults.slice();
          key = current.join(",");
        }
      }
      current.forEach(function (i, j) { set(j, i); });
      var frame = data.settings[key];
      text.textContent = data.texts[frame[0]];
      if (picture && frame[1] !== null) { picture.src = data.pictures[frame[1]]; }
      root.setAttribute("data-setting", key);
    }

    controls.forEach(function (el, k) {
      if (el.getAttribute("role") === "group") {
        el.querySelectorAll("button").forEach(function (b) {
          b.disabled = false;
          b.addEventListener("click", function () {
            set(k, Number(b.getAttribute("data-index")));
            show(k);
          });
        });
      } else {
        el.disabled = false;
        el.addEventListener(el.type === "range" ? "input" : "change", function () { show(k); });
      }
    });
    root.setAttribute("data-ready", "1");
  }

  function start() {
    document.querySelectorAll(".tfx-sw").forEach(setup);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
