// The only way the page talks to the server: /v1 with the bearer token of this browser tab.
// The token lives in sessionStorage (gone when the tab closes) and never in a URL.

const TOKEN_KEY = 'toolledger.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function signIn(value) {
  sessionStorage.setItem(TOKEN_KEY, value.trim());
}

export function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

function url(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== '') query.set(key, value);
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

async function request(path, params, accept) {
  if (!path.startsWith('/v1/')) throw new Error(`refusing a request outside /v1: ${path}`);
  const headers = { Accept: accept };
  const held = token();
  if (held) headers.Authorization = `Bearer ${held}`;
  const response = await fetch(url(path, params), { headers, cache: 'no-store', credentials: 'omit' });
  if (!response.ok) {
    let body = null;
    try { body = await response.json(); } catch { /* not JSON */ }
    const e = body && body.error;
    throw new ApiError(response.status, e ? e.code : 'http', e ? e.message : response.statusText, e && e.field);
  }
  return response;
}

/** GET a JSON document. */
export async function get(path, params) {
  return (await request(path, params, 'application/json')).json();
}

/** An NDJSON body as an array of parsed lines; a line with `error` ends it as an ApiError. */
export async function ndjson(path, params) {
  const text = await (await request(path, params, 'application/x-ndjson')).text();
  const out = [];
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const value = JSON.parse(line);
    if (value.error && !value.seq) throw new ApiError(200, value.error.code, value.error.message);
    out.push(value);
  }
  return out;
}
