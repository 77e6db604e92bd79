// The ipywidgets HTML manager typesets widget labels with MathJax 2's API (MathJax.Hub.Queue); the book
// loads MathJax 3. This file runs after MathJax's script (both deferred, this one later) and maps the one
// call the widgets make onto MathJax 3. Pages without math load no MathJax, and the widgets then skip it.
if (window.MathJax && !window.MathJax.Hub) {
  window.MathJax.Hub = {
    Queue: (command) => {
      const element = command[2];
      window.MathJax.startup.promise.then(() => window.MathJax.typesetPromise(element ? [element] : undefined));
    },
  };
}
