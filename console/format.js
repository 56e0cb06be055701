// Formatting of times, durations, statuses and JSON previews.
import { h } from './dom.js';

export const runStatuses = [
  'pending', 'running', 'waiting', 'blocked', 'completed', 'failed', 'cancelled',
  'terminated',
];

export function isTerminal(status) {
  return status === 'completed' || status === 'failed' || status === 'cancelled' ||
    status === 'terminated';
}

export function statusBadge(status) {
  return h('span', { class: `badge status-${status}` }, status);
}

function toMs(value) {
  if (value === null || value === undefined || value === '') return null;
  if (typeof value === 'number') return value;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? null : ms;
}

// "2026-12-01 08:30:22.366" in local time; "-" for none.
export function time(value) {
  const ms = toMs(value);
  if (ms === null || ms <= 0) return '-';
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.` +
    `${pad(d.getMilliseconds(), 3)}`;
}

// "1.2 s", "3 min 4 s", "2 h 5 min", "12 ms".
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '-';
  const sign = ms < 0 ? '-' : '';
  ms = Math.abs(ms);
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  if (ms < 60_000) return `${sign}${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) {
    return `${sign}${Math.floor(ms / 60_000)} min ${Math.floor((ms % 60_000) / 1000)} s`;
  }
  if (ms < 86_400_000) {
    return `${sign}${Math.floor(ms / 3_600_000)} h ${Math.floor((ms % 3_600_000) / 60_000)} min`;
  }
  return `${sign}${Math.floor(ms / 86_400_000)} d ${Math.floor((ms % 86_400_000) / 3_600_000)} h`;
}

export function between(from, to) {
  const a = toMs(from);
  const b = toMs(to) ?? Date.now();
  return a === null ? null : b - a;
}

// "3 s ago", "in 2 s".
export function relative(value, now = Date.now()) {
  const ms = toMs(value);
  if (ms === null || ms <= 0) return '-';
  const delta = ms - now;
  return delta >= 0 ? `in ${duration(delta)}` : `${duration(-delta)} ago`;
}

// One line of JSON, cut to `max` characters.
export function preview(value, max = 120) {
  if (value === undefined) return '';
  const text = typeof value === 'string' ? JSON.stringify(value) : JSON.stringify(value);
  if (text === undefined) return '';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
