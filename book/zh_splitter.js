/*
 * splitQuery for the zh_CN edition (book/conf.py puts it in language_data.js, before searchtools.js).
 * When the book was built, jieba cut the pages' Chinese text into words and the index holds those words.
 * Sphinx's own splitter leaves a Chinese query whole ("通信开销"), which matches no word of the index, so it
 * found nothing. Here each run of Chinese characters is cut into the longest words the index holds, left to
 * right ("通信" + "开销"); a character that starts no indexed word is dropped (the index keeps no one-character
 * words). Everything else is split as Sphinx splits it.
 */
var splitQuery = (query) => {
  const terms = (typeof Search !== "undefined" && Search._index && Search._index.terms) || {};
  const cjk = /[\u3400-\u9fff\uf900-\ufaff]/;
  const words = [];
  for (const part of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const run of part.split(/([\u3400-\u9fff\uf900-\ufaff]+)/u)) {
      if (!run) continue;
      if (!cjk.test(run)) { words.push(run); continue; }
      let i = 0;
      while (i < run.length) {
        let n = Math.min(8, run.length - i);
        while (n > 1 && !Object.prototype.hasOwnProperty.call(terms, run.slice(i, i + n))) n--;
        if (n > 1) words.push(run.slice(i, i + n));
        i += n;
      }
    }
  }
  return words.length ? words : [query];
};
