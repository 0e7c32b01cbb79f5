// Draws the figures a page embeds as JSON (<script type="application/json" data-chart="div id">)
// with plotly.js, which the app serves itself. A figure whose layout.meta.link is set opens that
// address, %s replaced by the clicked point's customdata, on a click.
"use strict";
function drawChart(div, figure) {
  var drawn = Plotly.react(div, figure.data, figure.layout, {responsive: true, displaylogo: false});
  var element = typeof div === "string" ? document.getElementById(div) : div;
  var link = figure.layout.meta && figure.layout.meta.link;
  if (link && !element.dataset.linked) {  // once: a live page draws the same div again
    element.dataset.linked = "yes";
    element.on("plotly_click", function (event) {
      var target = event.points[0].customdata;
      if (target !== null && target !== undefined) window.location.href = link.replace("%s", target);
    });
  }
  return drawn;
}
document.querySelectorAll('script[data-chart]').forEach(function (source) {
  drawChart(source.dataset.chart, JSON.parse(source.textContent));
});
