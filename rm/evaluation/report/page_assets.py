"""report.html's style sheet and script, inlined into the page (a file opened from disk or mailed fetches nothing).

The script builds the pair browser from the page's JSON block, putting every text in with `textContent`, never
as markup: a response holding `<script>` or `<img onerror=...>` shows as those characters and never runs. The
page's Content-Security-Policy admits this script alone (by its hash), so an inline handler could not run even if
a text ever reached the page as markup.
"""

STYLE = """
:root { --blue: #1f77b4; --orange: #ff7f0e; --grey: #8c8c8c; --bad: #b00020; --line: #d8d8d8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1400px;
       padding: 1em 2em 4em; color: #222; }
h1 { margin-bottom: 0.3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid var(--line); padding-bottom: 0.2em; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid var(--line); padding: 0.25em 0.6em; text-align: left; }
td { white-space: nowrap; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.overall td { font-weight: 600; background: #f8fbff; }
img { max-width: 100%; height: auto; display: block; margin: 0.6em 0; }
tr.section th { background: #e8eef6; text-align: left; }
td.against { white-space: nowrap; }
td.below { color: var(--bad); font-weight: 600; }
p.note, li.note { color: #555; }
.controls { display: flex; gap: 1.5em; align-items: center; flex-wrap: wrap; padding: 0.6em 0;
            position: sticky; top: 0; background: white; border-bottom: 1px solid var(--line); z-index: 1; }
#items { display: flex; flex-direction: column; gap: 1em; margin-top: 1em; }
article.item { border: 1px solid var(--line); border-left: 5px solid var(--blue); border-radius: 4px;
               padding: 0.5em 0.8em; }
article.item.wrong { border-left-color: var(--bad); }
article.item header { display: flex; gap: 1.2em; flex-wrap: wrap; font-size: 13px; color: #444; }
article.item header .margin { font-weight: 600; }
article.item header .where { color: #777; }
article.item.wrong header .margin { color: var(--bad); }
.responses { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 0.8em; }
.response h4 { margin: 0.4em 0 0.2em; font-size: 13px; }
.response.best h4 { color: var(--blue); }
.response.other h4 { color: var(--orange); }
pre { white-space: pre-wrap; word-break: break-word; background: #fafafa; border: 1px solid #eee;
      padding: 0.5em; margin: 0.2em 0; max-height: 24em; overflow: auto; }
details.prompt summary { cursor: pointer; color: #555; margin-top: 0.3em; }
"""

SCRIPT = """
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("rm-items").textContent);
  const subset = document.getElementById("subset");
  const sort = document.getElementById("sort");
  const wrong = document.getElementById("wrong");
  const list = document.getElementById("items");
  const shown = document.getElementById("shown");

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function num(x) { return x === null ? "n/a" : x.toFixed(3); }
  function clipped(text, left, before) {
    if (!left) return text;
    return before ? "[" + left + " earlier characters not shown]\\n" + text
                  : text + "\\n[" + left + " more characters not shown]";
  }
  function chars(n) { return n + (n === 1 ? " character" : " characters"); }
  function isWrong(item) { return item.margin !== null && item.margin < 0; }

  function card(item) {
    const box = el("article", "item" + (isWrong(item) ? " wrong" : ""));
    box.dataset.origin = item.origin;
    box.dataset.subset = item.subset;
    const head = el("header");
    head.append(el("span", "subset", item.subset), el("span", "origin", item.id ? "id " + item.id : item.where),
                el("span", "where", item.id ? item.where : ""),
                el("span", "margin", "margin " + num(item.margin)),
                el("span", "right", item.right + " of " + item.pairs + " ordered pairs right"));
    const prompt = el("details", "prompt");
    prompt.append(el("summary", "", "prompt (" + chars(item.prompt_chars) + ")"),
                  el("pre", "", clipped(item.prompt, item.prompt_cut, true)));
    const row = el("div", "responses");
    for (const r of item.responses) {
      const column = el("section", "response " + (r.best ? "best" : "other"));
      const place = r.place === null ? "" : "#" + r.place + " by reward, ";
      column.append(el("h4", "", place + r.label + ": reward " + num(r.reward) + " (" + chars(r.chars) + ")"),
                    el("pre", "text", clipped(r.text, r.cut, false)));
      row.append(column);
    }
    box.append(head, prompt, row);
    return box;
  }

  function byMargin(sign) {
    return function (a, b) {
      const missing = (a.margin === null) - (b.margin === null);
      if (missing) return missing;
      return sign * ((a.margin || 0) - (b.margin || 0)) || a.i - b.i;
    };
  }

  function render() {
    const picked = data.items.filter(function (item) {
      return (!subset.value || item.subset === subset.value) && (!wrong.checked || isWrong(item));
    });
    picked.sort(sort.value === "order" ? function (a, b) { return a.i - b.i; }
                                       : byMargin(sort.value === "margin" ? 1 : -1));
    list.replaceChildren.apply(list, picked.map(card));
    shown.textContent = picked.length + " of the " + data.items.length + " items held here";
  }

  subset.addEventListener("change", render);
  sort.addEventListener("change", render);
  wrong.addEventListener("change", render);
  render();
})();
"""
