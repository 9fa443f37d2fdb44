// pvperf's flame-graph viewer (inlined by flamegraph_html.py).  The page
// holds the frame tree as JSON in #data: {root, hz, diff?}; each node is
// {n: name, s: space, v: samples, c: children} and, in a differential
// graph, a: the first profile's samples (in the second's units), d: v - a.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const ROW = 17;            // px per frame row
  const MIN_WIDTH = 0.5;     // px: narrower frames are not drawn
  const HUES = {"guest-user": 205, "guest-kernel": 105, "emulator": 30,
                "host-kernel": 0, "all": 0};
  const SPACE_NAMES = {"guest-user": "guest user",
                       "guest-kernel": "guest kernel",
                       "emulator": "emulator", "host-kernel": "host kernel",
                       "all": "all samples"};
  const fg = document.getElementById("fg");
  const tip = document.getElementById("tip");
  const matched = document.getElementById("matched");
  const root = DATA.root;
  const nodes = [];
  let maxDepth = 0, zoomed = root, maxDelta = 0;

  function index(node, parent, depth) {
    node.parent = parent;
    node.depth = depth;
    node.id = nodes.length;
    maxDepth = Math.max(maxDepth, depth);
    // The scale of the delta colours: the root and the threads sum every
    // change below them, and would leave the functions pale.
    if (DATA.diff && depth >= 2) maxDelta = Math.max(maxDelta, Math.abs(node.d));
    nodes.push(node);
    for (const child of node.c) index(child, node, depth + 1);
  }

  function hash(name) {     // a stable shade per name, so neighbours differ
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
    return Math.abs(h);
  }

  function spaceColor(space, name) {
    if (space === "all") return "hsl(0, 0%, 80%)";
    return `hsl(${HUES[space]}, 65%, ${58 + hash(name) % 18}%)`;
  }

  function deltaColor(node) {  // red: more in the second profile; blue: less
    const r = maxDelta ? Math.min(1, Math.abs(node.d) / maxDelta) : 0;
    const light = Math.round(97 - 47 * r);
    return node.d >= 0 ? `hsl(0, 85%, ${light}%)` : `hsl(220, 85%, ${light}%)`;
  }

  function pct(x, of) { return of ? (100 * x / of).toFixed(2) + "%" : "-"; }

  function ms(samples) {
    return DATA.hz ? (1000 * samples / DATA.hz).toFixed(1) + " ms" : "";
  }

  function describe(node) {
    const lines = [node.n, `space: ${SPACE_NAMES[node.s]}`,
                   `${node.v} samples, ${pct(node.v, root.v)} of all` +
                   (zoomed !== root ? `, ${pct(node.v, zoomed.v)} of the zoomed frame` : "")];
    if (DATA.diff) {
      const sign = node.d >= 0 ? "+" : "";
      lines.push(`${DATA.diff[0]}: ${node.a.toFixed(1)} samples (${ms(node.a)})`,
                 `${DATA.diff[1]}: ${node.v} samples (${ms(node.v)})`,
                 `delta: ${sign}${node.d.toFixed(1)} samples (${sign}${ms(node.d)})`);
    }
    return lines.join("\n");
  }

  function build() {
    index(root, null, 0);
    fg.style.height = (maxDepth + 1) * ROW + "px";
    for (const node of nodes) {
      const el = document.createElement("div");
      el.className = "f";
      el.textContent = node.n;
      el.dataset.name = node.n;
      el.dataset.space = node.s;
      el.dataset.samples = node.v;
      el.dataset.depth = node.depth;
      el.dataset.id = node.id;
      el.dataset.parent = node.parent ? node.parent.id : -1;
      el.style.top = (maxDepth - node.depth) * ROW + "px";
      el.style.background = DATA.diff ? deltaColor(node) : spaceColor(node.s, node.n);
      // The space stays visible under the delta colour: a strip below.
      if (DATA.diff) {
        el.style.borderBottom = `3px solid ${spaceColor(node.s, node.n)}`;
        el.style.lineHeight = "13px";
      }
      el.fgNode = node;
      node.el = el;
      fg.appendChild(el);
    }
    for (const sw of document.querySelectorAll("#legend .sw"))
      sw.style.background = spaceColor(sw.dataset.space, "");
  }

  function place(node, x, width) {
    node.el.style.left = x + "px";
    node.el.style.width = width + "px";
    node.el.style.display = width >= MIN_WIDTH ? "" : "none";
  }

  function placeSubtree(node, x, width) {
    place(node, x, width);
    let cx = x;
    for (const child of node.c) {
      const w = node.v ? width * child.v / node.v : 0;
      placeSubtree(child, cx, w);
      cx += w;
    }
  }

  // The zoomed frame and its ancestors fill the width; its subtree is laid
  // out in proportion to it; every other frame is hidden.
  function layout() {
    const width = fg.clientWidth;
    for (const node of nodes) node.el.style.display = "none";
    for (let a = zoomed.parent; a; a = a.parent) place(a, 0, width);
    placeSubtree(zoomed, 0, width);
    fg.dataset.zoom = zoomed.n;
  }

  function search(pattern) {
    let re = null;
    if (pattern) {
      try { re = new RegExp(pattern); }
      catch (e) { re = new RegExp(pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")); }
    }
    let total = 0;
    for (const node of nodes) {
      const hit = re !== null && re.test(node.n);
      node.el.classList.toggle("match", hit);
      node.hit = hit;
      // A match inside a matching frame is already counted by it.
      let inside = false;
      for (let a = node.parent; a && !inside; a = a.parent) inside = a.hit;
      if (hit && !inside) total += node.v;
    }
    matched.dataset.samples = total;
    matched.textContent = re ? `Matched: ${total} of ${root.v} samples (${pct(total, root.v)})` : "";
  }

  build();
  layout();
  fg.addEventListener("click", (ev) => {
    const node = ev.target.fgNode;
    if (!node) return;
    zoomed = node;
    layout();
  });
  fg.addEventListener("mousemove", (ev) => {
    const node = ev.target.fgNode;
    if (!node) { tip.style.display = "none"; return; }
    tip.textContent = describe(node);
    tip.style.display = "block";
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  fg.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  document.getElementById("search").addEventListener("input",
    (ev) => search(ev.target.value));
  document.getElementById("reset").addEventListener("click", () => {
    zoomed = root;
    layout();
  });
  window.addEventListener("resize", layout);
})();
