/* lengthx site: search excerpts a reader can read.
 *
 * Sphinx's search shows, under each result, an excerpt of the page's text. It fetches the page and takes
 * the text of its main block, which on these pages includes the TeX source of every equation (MathJax
 * typesets it only in a browser window, not in a fetched copy) and the source of cells whose code is
 * folded away. Here the excerpt leaves out equations, code cells' sources and folded blocks.
 *
 * Opened from file://, a browser refuses those fetches (one console error per result); the results
 * themselves come from searchindex.js, a script, which loads fine. So from file:// the excerpts are
 * turned off and the results listed without them.
 */
(function () {
  "use strict";
  if (typeof DOCUMENTATION_OPTIONS !== "undefined" && window.location.protocol === "file:") {
    DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
  }
  const DROP = [".headerlink", "script", "style", ".math", "mjx-container", "div.cell_input",
                ".tag_hide-input .cell_input", "details.hide", ".toggle-details", "pre", "nav"];
  const readable = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    for (const q of DROP) doc.querySelectorAll(q).forEach((el) => el.remove());
    const main = doc.querySelector('[role="main"]');
    if (!main) return "";
    const block = (anchor && main.querySelector(anchor)) || main;
    // inline TeX that MathJax would have typeset (\( ... \), $...$) left in text nodes: drop it too
    return block.textContent.replace(/\\\([\s\S]*?\\\)|\\\[[\s\S]*?\\\]|\$\$[\s\S]*?\$\$/g, " ").replace(/\s+/g, " ");
  };
  // searchtools.js may load before or after this file; either way, patch before its init runs on DOMContentLoaded
  const patch = () => { if (typeof Search !== "undefined" && Search.htmlToText) Search.htmlToText = readable; };
  if (typeof Search !== "undefined") patch();
  else document.addEventListener("DOMContentLoaded", patch);
})();
