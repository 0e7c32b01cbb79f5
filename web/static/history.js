// The scenario history's charts from the columns the page embeds (#history-data, see
// web/history_page.py's history_data): one list per series aligned with the runs. Strings per point
// (commit and status for the hover, the cell's address for a click) are made here, not shipped.
"use strict";
(function () {
  var source = document.getElementById("history-data");
  if (!source) return;
  var history = JSON.parse(source.textContent), data = history.data;
  var x = data.runs.map(function (id) { return "#" + id; });
  var hovers = data.series.map(function (_, s) {
    return data.z[s].map(function (z, r) { return z === null ? "" : data.shas[r] + " " + data.statuses[Math.floor(z)]; });
  });
  var links = data.cell.map(function (cells) {
    return cells.map(function (cell, r) { return cell === null ? null : data.runs[r] + "/cells/" + cell; });
  });
  // A status heatmap cell that did not pass shows its status's icon (the label's first word), as on
  // the run page: readable without colour.
  var icons = data.z.map(function (row) {
    return row.map(function (z) {
      var label = z === null ? "" : data.statuses[Math.floor(z)];
      return label === "" || label.endsWith(" pass") ? "" : label.split(" ")[0];
    });
  });
  function traces(chart) {
    if (chart.value === null)  // the status heatmap: one row per series
      return [Object.assign({x: x, y: data.series, z: data.z, text: icons, hovertext: hovers, customdata: links},
                            chart.trace)];
    return data.series.map(function (name, s) {
      return Object.assign({x: x, y: data[chart.value][s], name: name, text: hovers[s], customdata: links[s]},
                           chart.trace);
    });
  }
  history.charts.forEach(function (chart) {
    if (!chart.empty) drawChart(chart.id, {data: traces(chart), layout: chart.layout});
  });
})();
