// The run page while its run is queued or running: it polls live.json and updates the counts, the
// coverage, the job progress and the heatmap in place; once the run has finished it reloads once.
"use strict";
(function () {
  var page = document.getElementById("run-page");
  var runId = page.dataset.run;
  var heatmap = document.getElementById("heatmap");
  function show(state) {
    document.getElementById("run-status").textContent = state.status;
    Object.keys(state.counts).forEach(function (status) {
      var count = document.querySelector('[data-count="' + status + '"]');
      if (count) count.textContent = state.counts[status];
    });
    var coverage = document.getElementById("coverage");
    if (coverage) coverage.textContent = state.coverage;
    document.getElementById("matrix-rows").textContent = state.matrix.rows;
    document.getElementById("matrix-pages").textContent = state.matrix.pages;
    var total = state.jobs.total, over = state.jobs.over;
    document.getElementById("jobs-text").textContent = over + " of " + total + (total === 1 ? " job" : " jobs") + " finished";
    document.getElementById("jobs-bar").style.width = (total ? 100 * over / total : 0) + "%";
  }
  // The state the page shows: a poll sends it, and the server answers "unchanged" (a few counts, no
  // heatmap) until the run has moved.
  var token = page.dataset.token;
  function poll() {
    var query = new URLSearchParams(window.location.search);
    query.set("since", token);
    fetch("/runs/" + runId + "/live.json?" + query.toString(), {cache: "no-store"})
      .then(function (response) { return response.json(); })
      .then(function (state) {
        if (state.unchanged) { window.setTimeout(poll, Number(page.dataset.poll)); return; }
        token = state.token;
        show(state);
        drawChart(heatmap, state.figure);
        // Finished: reload once for the report (coverage, the diff against the base).
        if (!state.live) window.location.reload();
        else window.setTimeout(poll, Number(page.dataset.poll));
      })
      .catch(function () { window.setTimeout(poll, Number(page.dataset.poll)); });
  }
  if (page.dataset.live === "true") window.setTimeout(poll, Number(page.dataset.poll));
})();
