/* oompost report: optional niceties. The page is complete without them. */
(function () {
  "use strict";
  var doc = document;
  doc.documentElement.classList.add("js");
  doc.body.classList.add("js");

  function copyText(text, btn) {
    function done(ok) {
      btn.textContent = ok ? "copied" : "select + copy";
      setTimeout(function () { btn.textContent = "copy"; }, 1500);
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallback(text)); });
    } else {
      done(fallback(text));
    }
  }
  function fallback(text) {
    var ta = doc.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.style.position = "fixed";
    ta.style.opacity = "0";
    doc.body.appendChild(ta);
    ta.select();
    var ok = false;
    try { ok = doc.execCommand("copy"); } catch (e) { ok = false; }
    doc.body.removeChild(ta);
    return ok;
  }

  Array.prototype.forEach.call(doc.querySelectorAll("pre[data-copy]"), function (pre) {
    var wrap = doc.createElement("div");
    wrap.className = "pre-wrap";
    pre.parentNode.insertBefore(wrap, pre);
    wrap.appendChild(pre);
    var btn = doc.createElement("button");
    btn.type = "button";
    btn.className = "copy-btn";
    btn.textContent = "copy";
    btn.addEventListener("click", function () { copyText(pre.textContent, btn); });
    wrap.appendChild(btn);
  });

  Array.prototype.forEach.call(doc.querySelectorAll("[data-toggle-details]"), function (btn) {
    btn.addEventListener("click", function () {
      var scope = doc.querySelector(btn.getAttribute("data-toggle-details"));
      if (!scope) { return; }
      var all = scope.querySelectorAll("details");
      var open = btn.textContent === "expand all";
      Array.prototype.forEach.call(all, function (d) { d.open = open; });
      btn.textContent = open ? "collapse all" : "expand all";
    });
  });

  // Print everything, including collapsed details.
  var reopened = [];
  window.addEventListener("beforeprint", function () {
    reopened = Array.prototype.filter.call(doc.querySelectorAll("details:not([open])"), function (d) {
      d.open = true; return true;
    });
  });
  window.addEventListener("afterprint", function () {
    reopened.forEach(function (d) { d.open = false; });
    reopened = [];
  });

  // Timeline read-out: the nearest point's values under the pointer.
  var tl = doc.querySelector(".tl");
  if (!tl) { return; }
  var plot = tl.querySelector(".tl-plot"), hover = tl.querySelector(".tl-hover");
  var x0 = parseFloat(tl.getAttribute("data-x0")), x1 = parseFloat(tl.getAttribute("data-x1"));
  var points = null;
  function data() {
    if (points === null) {
      points = [];
      try {
        var island = JSON.parse(doc.getElementById("oompost-data").textContent);
        points = ((island.timeline && island.timeline.points) || []).filter(function (p) { return p[0] !== null; });
        points.sort(function (a, b) { return a[0] - b[0]; });
      } catch (e) { points = []; }
    }
    return points;
  }
  var GiB = 1073741824;
  function gib(v) { return v === null || v === undefined ? "n/a" : (v / GiB).toFixed(2) + " GiB"; }
  function div(cls) { var d = doc.createElement("div"); d.className = cls; return d; }
  plot.addEventListener("mousemove", function (ev) {
    var pts = data();
    if (!pts.length || !hover || !(x1 > x0)) { return; }
    var rect = plot.getBoundingClientRect();
    var xv = x0 + (ev.clientX - rect.left) / rect.width * (x1 - x0);
    var lo = 0, hi = pts.length - 1;
    while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (pts[mid][0] < xv) { lo = mid; } else { hi = mid; } }
    var p = Math.abs(pts[lo][0] - xv) <= Math.abs(pts[hi][0] - xv) ? pts[lo] : pts[hi];
    var pct = Math.max(0, Math.min(100, (p[0] - x0) / (x1 - x0) * 100));
    hover.textContent = "";
    var line = div("vline");
    line.style.left = pct + "%";
    var box = div("readout");
    box.textContent = (tl.querySelector(".tl-xtitle").textContent || "x") + " " + p[0] +
      " · allocated " + gib(p[1]) + " · reserved " + gib(p[2]);
    if (pct > 55) { box.style.right = (100 - pct) + "%"; box.style.marginRight = "8px"; }
    else { box.style.left = pct + "%"; box.style.marginLeft = "8px"; }
    hover.appendChild(line);
    hover.appendChild(box);
  });
  plot.addEventListener("mouseleave", function () { hover.textContent = ""; });
})();
