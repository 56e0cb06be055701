// The console's shell: login, navigation, routing by the URL's hash, the
// theme, and the keyboard. Pages are modules with
// `mount(element, params, shell)` answering `{ unmount() }`.
//
// Routes: #/runs?status=&flow=&q=, #/runs/ID, #/hooks?token=, #/tasks,
// #/cluster. Nothing secret ever goes into the hash: the API key stays in
// sessionStorage (api.js).
import { api, apiKey, ApiError, call, forgetApiKey, setApiKey } from './api.js';
import { h, replace } from './dom.js';
import * as runsPage from './runs.js';
import * as runPage from './run.js';
import * as hooksPage from './hooks.js';
import * as tasksPage from './tasks.js';
import * as clusterPage from './cluster.js';

const root = document.getElementById('app');
let current = null;  // the mounted page

// ---- theme: the system's, unless the user picked one (kept per browser;
// a preference, not a secret).
const themeKey = 'durin.theme';
const systemDark = window.matchMedia('(prefers-color-scheme: dark)');

function effectiveTheme() {
  const chosen = localStorage.getItem(themeKey);
  if (chosen === 'light' || chosen === 'dark') return chosen;
  return systemDark.matches ? 'dark' : 'light';
}

function applyTheme() {
  const theme = effectiveTheme();
  document.documentElement.dataset.theme = theme;
  const button = document.getElementById('theme-toggle');
  if (button) {
    button.textContent = theme === 'dark' ? 'Light theme' : 'Dark theme';
    button.setAttribute('aria-pressed', String(theme === 'dark'));
  }
}

function toggleTheme() {
  localStorage.setItem(themeKey, effectiveTheme() === 'dark' ? 'light' : 'dark');
  applyTheme();
}

systemDark.addEventListener('change', applyTheme);
applyTheme();

// ---- routing
export function navigate(hash) {
  if (location.hash === hash) {
    route();
  } else {
    location.hash = hash;
  }
}

function parseHash() {
  const hash = location.hash.replace(/^#/, '') || '/runs';
  const [path, search = ''] = hash.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(search) };
}

function pageFor(parts) {
  if (parts[0] === 'runs' && parts.length === 2) return { page: runPage, name: 'runs' };
  if (parts[0] === 'runs') return { page: runsPage, name: 'runs' };
  if (parts[0] === 'hooks') return { page: hooksPage, name: 'hooks' };
  if (parts[0] === 'tasks') return { page: tasksPage, name: 'tasks' };
  if (parts[0] === 'cluster') return { page: clusterPage, name: 'cluster' };
  return null;
}

const shell = { navigate, api, call };

function route() {
  if (current) {
    current.unmount?.();
    current = null;
  }
  if (!apiKey()) {
    showLogin();
    return;
  }
  const { parts, params } = parseHash();
  const found = pageFor(parts);
  const main = showFrame(found?.name);
  if (!found) {
    replace(main, h('p', { class: 'empty' }, 'No such page.'));
    return;
  }
  params.set('id', parts[1] ?? '');
  current = found.page.mount(main, params, shell);
  main.focus({ preventScroll: true });
}

// ---- the frame: header with navigation, then the page
function showFrame(active) {
  const link = (name, label) => h('a', {
    href: `#/${name}`,
    class: name === active ? 'active' : null,
    'aria-current': name === active ? 'page' : null,
  }, label);
  const main = h('main', { id: 'page', tabindex: '-1' });
  replace(root,
    h('header', { class: 'top' },
      h('a', { class: 'brand', href: '#/runs' }, 'durin'),
      h('nav', { 'aria-label': 'pages' },
        link('runs', 'Runs'), link('hooks', 'Hooks'), link('tasks', 'Tasks'),
        link('cluster', 'Cluster')),
      h('div', { class: 'tools' },
        h('button', { id: 'theme-toggle', type: 'button', onclick: toggleTheme }),
        h('button', { id: 'logout', type: 'button', onclick: logout }, 'Log out'))),
    main);
  applyTheme();
  return main;
}

function logout() {
  forgetApiKey();
  location.hash = '#/runs';
  route();
}

// ---- login: the only thing shown without a key
function showLogin(message) {
  const input = h('input', {
    id: 'api-key', type: 'password', name: 'api-key', autocomplete: 'off',
    required: true, placeholder: 'dk_…', 'aria-label': 'API key',
  });
  const problem = h('p', { class: 'error', role: 'alert' }, message ?? '');
  const form = h('form', {
    class: 'login card',
    onsubmit: async (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      try {
        await call('GET', '/v1/runs?limit=1', { key });
      } catch (e) {
        problem.textContent = e instanceof ApiError && e.status === 401
          ? 'That key is not valid.' : `Cannot log in: ${e.message}`;
        return;
      }
      setApiKey(key);
      route();
    },
  },
  h('h1', {}, 'durin console'),
  h('label', { for: 'api-key' }, 'API key'),
  input,
  h('p', { class: 'hint' },
    'The key stays in this tab (sessionStorage) and is sent only as an ',
    h('code', {}, 'Authorization'), ' header. The node\'s admin key is in ',
    h('code', {}, 'DATA_DIR/admin.key'), '.'),
  h('button', { type: 'submit', class: 'primary' }, 'Log in'),
  problem);
  replace(root,
    h('main', { id: 'page', class: 'login-page' },
      form,
      h('button', { id: 'theme-toggle', type: 'button', class: 'corner', onclick: toggleTheme })));
  applyTheme();
  input.focus();
}

window.addEventListener('durin:unauthorized', () => {
  if (current) current.unmount?.();
  current = null;
  showLogin('The key was refused (revoked or unknown). Log in again.');
});

// ---- keyboard: `/` searches, j/k move through the list, Enter opens.
function typing(target) {
  return target instanceof HTMLElement &&
    (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName));
}

document.addEventListener('keydown', (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (typing(event.target) || document.querySelector('dialog[open]')) return;
  if (event.key === '/') {
    const search = document.querySelector('[data-search]');
    if (search) {
      event.preventDefault();
      search.focus();
      search.select?.();
    }
    return;
  }
  if (event.key !== 'j' && event.key !== 'k' && event.key !== 'Enter') return;
  const rows = [...document.querySelectorAll('[data-row]')];
  if (rows.length === 0) return;
  let at = rows.findIndex((row) => row.classList.contains('selected'));
  if (event.key === 'Enter') {
    if (at >= 0 && !(event.target instanceof HTMLAnchorElement)) {
      event.preventDefault();
      rows[at].querySelector('a')?.click();
    }
    return;
  }
  event.preventDefault();
  at = event.key === 'j' ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
  rows.forEach((row) => {
    row.classList.remove('selected');
    row.removeAttribute('aria-selected');
  });
  rows[at].classList.add('selected');
  rows[at].setAttribute('aria-selected', 'true');
  rows[at].scrollIntoView({ block: 'nearest' });
});

window.addEventListener('hashchange', route);
route();
