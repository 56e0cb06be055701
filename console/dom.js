// Building DOM nodes without innerHTML: every value from the API becomes a
// text node, so nothing a run, a hook or a worker wrote can run as markup.

// h('a', {href: '#/runs', class: 'x', onclick: fn}, 'text', child, [more])
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'style' && typeof value === 'object') {
      Object.assign(element.style, value);  // CSSOM: allowed by the CSP
    } else if (name === 'dataset') {
      Object.assign(element.dataset, value);
    } else if (value === true) {
      element.setAttribute(name, '');
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) {
      append(element, child);
    } else if (child instanceof Node) {
      element.appendChild(child);
    } else {
      element.appendChild(document.createTextNode(String(child)));
    }
  }
}

// Replaces the children of `element` with `children`.
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

// A <pre> with pretty-printed JSON, for the raw views.
export function jsonBlock(value, attributes = {}) {
  return h('pre', { class: 'json', ...attributes },
    JSON.stringify(value, null, 2));
}

// A collapsible raw JSON view.
export function rawView(title, value) {
  return h('details', { class: 'raw' },
    h('summary', {}, title), jsonBlock(value));
}

// Re-renders `container` with `render()` and keeps the row the keyboard
// selected (by its `data-<attribute>` value), so live updates do not lose
// the user's place in a list.
export function keepSelected(container, attribute, render) {
  const selected = container.querySelector(`.selected[data-${attribute}]`)
    ?.getAttribute(`data-${attribute}`);
  render();
  if (selected === undefined || selected === null) return;
  for (const row of container.querySelectorAll(`[data-${attribute}]`)) {
    if (row.getAttribute(`data-${attribute}`) === selected && row.hasAttribute('data-row')) {
      row.classList.add('selected');
      row.setAttribute('aria-selected', 'true');
      return;
    }
  }
}
