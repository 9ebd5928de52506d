// The console's only script: keyboard shortcuts. "/" focuses the search
// box, "j" and "k" move between the rows of a list or the nodes of a
// graph. Every page works without it.
(function () {
  "use strict";
  function items() {
    var g = document.querySelectorAll("#graph a");
    if (g.length) return Array.prototype.slice.call(g);
    return Array.prototype.slice.call(document.querySelectorAll("table.list tbody th a, ul.changes a"));
  }
  document.addEventListener("keydown", function (e) {
    var t = e.target;
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA")) return;
    if (e.key === "/") {
      var q = document.getElementById("q");
      if (q) { q.focus(); e.preventDefault(); }
      return;
    }
    if (e.key !== "j" && e.key !== "k") return;
    var list = items();
    if (!list.length) return;
    var i = list.indexOf(document.activeElement);
    i = e.key === "j" ? Math.min(i + 1, list.length - 1) : Math.max(i - 1, 0);
    list[i].focus();
    e.preventDefault();
  });
})();
