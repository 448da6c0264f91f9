// An experiment's page while it runs: ask for its state every 2 s and show the page again
// once a run was stored or the status changed (the server computes it afresh then).
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const follow = async () => {
    try {
      const answer = await fetch(live.dataset.state, { cache: "no-store" });
      if (answer.ok) {
        const state = await answer.json();
        if (`${state.status} ${state.runs}` !== live.dataset.seen) {
          window.location.reload();
          return;
        }
      }
    } catch (error) {
      // the server is restarting or gone: keep asking
    }
    window.setTimeout(follow, 2000);
  };
  window.setTimeout(follow, 2000);
})();
