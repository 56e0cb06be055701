// Live updates by polling. A poller calls `tick` now and then every
// `intervalMs` after the previous tick finished (never two at once). It
// pauses while the tab is hidden and ticks once when it shows again; it
// stops for good when `tick` answers 'stop' (a run reached a terminal
// state) or when stop() is called (the page went away). `onState` hears
// 'live', 'paused' and 'stopped'.

export function poller(tick, intervalMs, onState = () => {}) {
  let timer = null;
  let running = false;
  let stopped = false;

  const schedule = () => {
    if (stopped || document.hidden) return;
    timer = setTimeout(run, intervalMs);
  };

  async function run() {
    timer = null;
    if (stopped || running) return;
    if (document.hidden) {
      onState('paused');
      return;
    }
    running = true;
    let answer;
    try {
      answer = await tick();
    } catch {
      answer = undefined;  // the page shows its own error; keep polling
    }
    running = false;
    if (answer === 'stop') {
      stop();
      return;
    }
    if (!stopped) onState('live');
    schedule();
  }

  const onVisibility = () => {
    if (stopped) return;
    if (document.hidden) {
      if (timer) clearTimeout(timer);
      timer = null;
      onState('paused');
    } else if (!timer && !running) {
      run();
    }
  };

  function stop() {
    if (stopped) return;
    stopped = true;
    if (timer) clearTimeout(timer);
    document.removeEventListener('visibilitychange', onVisibility);
    onState('stopped');
  }

  document.addEventListener('visibilitychange', onVisibility);
  run();
  return { stop, get stopped() { return stopped; } };
}
