// Our own accessibility checks of the dashboard's pages, run in the browser by the tests
// (`tests/dashboard_a11y.rs`) with WebDriver's execute: no network, no library. The script's
// value is the list of violations, each "rule: element — detail"; an empty list passes.
//
// Rules: html[lang]; one main; every nav labelled, and their labels unique; unique ids; no
// skipped heading level (the first is h1); every th has a scope; every table a caption (or a
// label); no positive tabindex; every control (link, button, input, select, textarea, summary)
// has an accessible name; every svg[role=img] is labelled; every focusable element shows a
// focus indicator when focused from the keyboard; text contrast >= 4.5:1 (3:1 for large text),
// from computed styles, colours alpha-blended over the ancestors' backgrounds.
var out = [];
function describe(el) {
  var s = el.tagName.toLowerCase();
  if (el.id) { s += "#" + el.id; }
  var cls = el.getAttribute("class");
  if (cls) { s += "." + cls.trim().split(/\s+/).join("."); }
  var text = (el.textContent || "").replace(/\s+/g, " ").trim();
  if (text) { s += " \"" + text.slice(0, 40) + "\""; }
  return s;
}
function fail(rule, el, detail) {
  out.push(rule + ": " + (el ? describe(el) : "page") + (detail ? " — " + detail : ""));
}
function rendered(el) {
  for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
    var cs = getComputedStyle(e);
    if (cs.display === "none" || cs.visibility === "hidden") { return false; }
    if (e.getAttribute("aria-hidden") === "true") { return false; }
  }
  var fold = el.closest("details:not([open])");
  if (fold && !el.closest("summary")) { return false; }
  return el.getClientRects().length > 0;
}
function textOf(el) { return (el ? el.textContent : "").replace(/\s+/g, " ").trim(); }

// The accessible name, as far as these pages need it.
function name(el) {
  var by = el.getAttribute("aria-labelledby");
  if (by) {
    return by.split(/\s+/).map(function (id) { return textOf(document.getElementById(id)); }).join(" ").trim();
  }
  var label = (el.getAttribute("aria-label") || "").trim();
  if (label) { return label; }
  var tag = el.tagName.toLowerCase();
  if (tag === "input" || tag === "select" || tag === "textarea") {
    var type = (el.getAttribute("type") || "").toLowerCase();
    if (type === "submit" || type === "button" || type === "reset") { return (el.value || "").trim(); }
    var fromLabels = Array.prototype.map.call(el.labels || [], textOf).join(" ").trim();
    if (fromLabels) { return fromLabels; }
    return (el.getAttribute("title") || "").trim();
  }
  var text = textOf(el);
  if (!text) {
    el.querySelectorAll("img[alt]").forEach(function (i) { text += i.getAttribute("alt"); });
  }
  return text || (el.getAttribute("title") || "").trim();
}

// Colours: "rgb(a, b, c)" / "rgba(a, b, c, d)" / "color(srgb r g b / a)" -> [r, g, b, a].
function parse(c) {
  var m = c.match(/rgba?\(([^)]+)\)/);
  if (m) {
    var p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  m = c.match(/color\(srgb ([^)]+)\)/);
  if (m) {
    var q = m[1].split(/[\s\/]+/).filter(Boolean).map(Number);
    return [q[0] * 255, q[1] * 255, q[2] * 255, q.length > 3 ? q[3] : 1];
  }
  return null;
}
function over(top, bottom) { // top alpha-blended over an opaque bottom
  var a = top[3];
  return [0, 1, 2].map(function (i) { return top[i] * a + bottom[i] * (1 - a); }).concat(1);
}
function luminance(c) {
  var v = c.slice(0, 3).map(function (x) {
    x /= 255;
    return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
  });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function ratio(a, b) {
  var la = luminance(a), lb = luminance(b);
  return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
}
// The opaque colour behind `el`: its and its ancestors' backgrounds, blended from the canvas up;
// an SVG text drawn on a shape it follows is on that shape's fill.
function background(el) {
  var layers = [];
  var prev = el.previousElementSibling;
  if (el.namespaceURI === "http://www.w3.org/2000/svg" && prev && /^(rect|circle|path)$/.test(prev.tagName)) {
    layers.push(parse(getComputedStyle(prev).fill) || [0, 0, 0, 0]);
  }
  for (var e = el; e && e.nodeType === 1; e = e.parentElement) {
    var c = parse(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); }
  }
  var dark = getComputedStyle(document.documentElement).colorScheme.indexOf("dark") >= 0 &&
    matchMedia("(prefers-color-scheme: dark)").matches;
  var bg = dark ? [18, 18, 18, 1] : [255, 255, 255, 1];
  for (var i = layers.length - 1; i >= 0; i--) { bg = over(layers[i], bg); }
  return bg;
}
function contrast(el) {
  var cs = getComputedStyle(el);
  var svgText = el.namespaceURI === "http://www.w3.org/2000/svg";
  var fg = parse(svgText ? cs.fill : cs.color);
  if (!fg) { return; }
  var bg = background(el);
  var c = ratio(over(fg, bg), bg);
  var size = parseFloat(cs.fontSize), bold = parseInt(cs.fontWeight, 10) >= 700;
  var need = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
  if (c < need) {
    fail("contrast", el, c.toFixed(2) + ":1 < " + need + ":1 (" + (svgText ? cs.fill : cs.color) +
      " on rgb(" + bg.slice(0, 3).map(Math.round).join(", ") + "))");
  }
}

var html = document.documentElement;
if (!(html.getAttribute("lang") || "").trim()) { fail("html[lang]", html, "no language"); }
var mains = document.querySelectorAll("main, [role=main]");
if (mains.length !== 1) { fail("one main", null, mains.length + " main elements"); }
var navs = document.querySelectorAll("nav, [role=navigation]"), navNames = {};
if (navs.length === 0) { fail("labelled nav", null, "no nav"); }
navs.forEach(function (n) {
  var l = (n.getAttribute("aria-label") || "").trim() || (n.getAttribute("aria-labelledby") ? name(n) : "");
  if (!l) { fail("labelled nav", n, "no aria-label"); } else if (navNames[l]) { fail("labelled nav", n, "label \"" + l + "\" twice"); }
  navNames[l] = true;
});
var ids = {};
document.querySelectorAll("[id]").forEach(function (el) {
  if (ids[el.id]) { fail("unique ids", el, "id \"" + el.id + "\" repeated"); }
  ids[el.id] = true;
});
var last = 0;
document.querySelectorAll("h1, h2, h3, h4, h5, h6").forEach(function (h) {
  var level = Number(h.tagName[1]);
  if (level > last + 1) { fail("heading levels", h, "h" + level + " after h" + last); }
  last = level;
});
document.querySelectorAll("th").forEach(function (th) {
  if (!/^(col|row|colgroup|rowgroup)$/.test(th.getAttribute("scope") || "")) { fail("th[scope]", th, "no scope"); }
});
document.querySelectorAll("table").forEach(function (t) {
  if (!textOf(t.querySelector(":scope > caption")) && !t.getAttribute("aria-label") && !t.getAttribute("aria-labelledby")) {
    fail("table caption", t, "no caption or label");
  }
});
document.querySelectorAll("[tabindex]").forEach(function (el) {
  if (Number(el.getAttribute("tabindex")) > 0) { fail("positive tabindex", el, "tabindex " + el.getAttribute("tabindex")); }
});
var controls = "a[href], button, input:not([type=hidden]), select, textarea, summary, [role=button], [tabindex]";
document.querySelectorAll(controls).forEach(function (el) {
  if (el.tagName.toLowerCase() === "main" || el.getAttribute("tabindex") === "-1") { return; }
  if (!name(el)) { fail("accessible name", el, "control without a name"); }
});
document.querySelectorAll("svg[role=img]").forEach(function (svg) {
  var title = svg.querySelector(":scope > title");
  if (!name(svg) && !textOf(title)) { fail("svg label", svg, "role=img without aria-label or title"); }
});
// Focus indicators: each rendered focusable element, focused as from the keyboard.
var active = document.activeElement;
document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary").forEach(function (el) {
  if (!rendered(el) || el.disabled) { return; }
  el.focus({ focusVisible: true, preventScroll: true });
  if (document.activeElement !== el) { return; }
  var cs = getComputedStyle(el);
  var outline = cs.outlineStyle !== "none" && parseFloat(cs.outlineWidth) >= 2;
  if (!outline && cs.boxShadow === "none") { fail("focus indicator", el, "no outline or shadow when focused"); }
});
if (active && active !== document.body) { active.focus({ preventScroll: true }); } else if (document.activeElement) { document.activeElement.blur(); }
// Contrast of every rendered element with text of its own.
document.querySelectorAll("body *").forEach(function (el) {
  if (/^(SCRIPT|STYLE|TITLE|OPTION)$/i.test(el.tagName) || !rendered(el)) { return; }
  var own = Array.prototype.some.call(el.childNodes, function (n) { return n.nodeType === 3 && n.textContent.trim(); });
  if (own && !el.disabled) { contrast(el); }
});
return out;
