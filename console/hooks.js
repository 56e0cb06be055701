// Hooks: look up a token (owner, state, retention, metadata) and resume it
// with a JSON payload. Each resume sends its own idempotency key, kept for
// a retry of the same payload, so a lost answer never delivers twice.
import { api, ApiError, newIdempotencyKey } from './api.js';
import { h, jsonBlock, replace } from './dom.js';
import { relative, time } from './format.js';

export function mount(main, params, shell) {
  let resumeKey = null;
  let lastPayload = null;
  const token = h('input', {
    id: 'hook-token', type: 'search', 'data-search': true, required: true,
    placeholder: 'token, e.g. order:A-100  ( / )', 'aria-label': 'hook token',
    value: params.get('token') ?? '',
  });
  const result = h('section', { id: 'hook' });
  replace(main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Hooks')),
    h('form', {
      class: 'inline search',
      onsubmit: (event) => {
        event.preventDefault();
        const text = token.value.trim();
        if (text) shell.navigate(`#/hooks?token=${encodeURIComponent(text)}`);
      },
    }, token, h('button', { type: 'submit' }, 'Look up')),
    result);

  async function lookUp(text) {
    replace(result, h('p', { class: 'hint' }, `Looking up ${text}…`));
    let hook;
    try {
      hook = await api.getHook(text);
    } catch (e) {
      replace(result, h('p', { class: 'empty', id: 'hook-missing' },
        e instanceof ApiError && e.status === 404
          ? `No hook ${text} in this tenant (never claimed, or released).` : e.message));
      return;
    }
    const fact = (label, ...value) => [h('dt', {}, label), h('dd', {}, ...value)];
    const payload = h('textarea', {
      id: 'resume-payload', rows: 6, spellcheck: 'false', 'aria-label': 'payload (JSON)',
    }, '{\n  "note": "from the console",\n  "done": true\n}');
    const message = h('p', { role: 'status', id: 'resume-result' });
    const resume = h('form', {
      class: 'card resume',
      onsubmit: async (event) => {
        event.preventDefault();
        let value;
        try {
          value = JSON.parse(payload.value);
        } catch (e) {
          message.className = 'error';
          message.textContent = `The payload is not JSON: ${e.message}`;
          return;
        }
        // A new payload is a new command; the same payload again (after an
        // error) is a retry of the same one and reuses its key.
        if (payload.value !== lastPayload || !resumeKey) {
          resumeKey = newIdempotencyKey('resume');
          lastPayload = payload.value;
        }
        try {
          const answer = await api.resumeHook(text, value, resumeKey);
          resumeKey = null;
          message.className = 'ok';
          replace(message, 'Delivered (durable) to ',
            h('a', { href: `#/runs/${encodeURIComponent(answer.runId)}` }, answer.runId), '.');
        } catch (e) {
          message.className = 'error';
          message.textContent = `${e.code ? `${e.code}: ` : ''}${e.message}`;
        }
      },
    },
    h('h2', {}, 'Resume'),
    h('label', { for: 'resume-payload' }, 'Payload (JSON)'),
    payload,
    h('button', { type: 'submit', class: 'primary', id: 'resume-button', disabled: hook.state !== 'active' }, 'Resume'),
    hook.state !== 'active' ? h('p', { class: 'hint' }, 'A retained token has no run reading it: nothing to resume.') : null,
    message);
    replace(result,
      h('div', { class: 'facts' }, h('dl', {},
        fact('Token', h('code', { id: 'hook-token-value' }, hook.token)),
        fact('Owner', h('a', { href: `#/runs/${encodeURIComponent(hook.runId)}`, id: 'hook-owner' }, hook.runId)),
        fact('State', h('span', { class: `badge state-${hook.state}` }, hook.state)),
        fact('Created', time(hook.createdAt)),
        fact('Retained until', hook.retainUntil ? `${time(hook.retainUntil)} (${relative(hook.retainUntil)})` : 'released when the run ends')),
      h('h3', {}, 'Metadata'), jsonBlock(hook.metadata)),
      resume);
  }

  const initial = params.get('token');
  if (initial) {
    lookUp(initial);
  } else {
    replace(result, h('p', { class: 'hint' },
      'A hook is addressed by its token. A run page links the hooks its history created.'));
    token.focus();
  }
  return { unmount() {} };
}
