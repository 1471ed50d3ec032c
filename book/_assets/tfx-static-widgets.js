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
    var notice = root.querySelector(".tfx-sw-moved");
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

    // The precomputed setting nearest to `want` that keeps control k where the reader put it:
    // fewest other controls moved, then the smallest moves. Null when k's position has none.
    function nearest(want, k) {
      var best = null, bestCost = null;
      Object.keys(data.settings).forEach(function (key) {
        var s = key.split(",").map(Number);
        if (s[k] !== want[k]) { return; }
        var moved = 0, distance = 0;
        s.forEach(function (i, j) {
          if (i !== want[j]) { moved += 1; distance += Math.abs(i - want[j]); }
        });
        var cost = [moved, distance];
        if (bestCost === null || cost[0] < bestCost[0] ||
            (cost[0] === bestCost[0] && cost[1] < bestCost[1])) { best = s; bestCost = cost; }
      });
      return best;
    }

    function readout(j, i) {
      var el = controls[j];
      if (el.type === "range") { return JSON.parse(el.getAttribute("data-readouts"))[i]; }
      return String(values[j][i]);
    }

    function show(k) {
      var want = controls.map(function (_, j) { return get(j); });
      var current = want.join(",") in data.settings ? want : nearest(want, k);
      if (current === null) { current = data.defaults.slice(); }  // not a stop at all
      var moved = [];
      current.forEach(function (i, j) {
        if (i !== want[j]) {
          moved.push("“" + controls[j].getAttribute("data-label") + "” to " + readout(j, i));
        }
        set(j, i);
      });
      var key = current.join(",");
      var frame = data.settings[key];
      text.textContent = data.texts[frame[0]];
      if (picture) {  // a setting without a picture hides the last one: never a stale figure
        if (frame[1] !== null) { picture.src = data.pictures[frame[1]]; }
        picture.hidden = frame[1] === null;
      }
      if (notice) {
        notice.hidden = moved.length === 0;
        notice.textContent = moved.length === 0 ? "" :
          "That combination is not precomputed on this page; the nearest one is shown, with " +
          moved.join(" and ") + ".";
      }
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
