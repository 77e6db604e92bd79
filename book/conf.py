"""Sphinx configuration of the book: MyST-NB renders the committed notebooks without running them.

book/build.py stages the sources (index.md, notebooks/, assets/) and fetches the JavaScript the pages
load (MathJax, the widget manager) into build/book-vendor/static, served from the book itself: no page
loads anything from a CDN.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

project = "commlib"
author = "the commlib contributors"  # the footer's "By ..." (Sphinx's default: "Author name not set")
copyright = "the commlib contributors, MIT licence"
html_title = "commlib: communication overhead in distributed training"
extensions = ["myst_nb", "sphinx.ext.mathjax"]
myst_enable_extensions = ["dollarmath", "amsmath"]  # $...$ and $$...$$ as JupyterLab renders them
myst_heading_anchors = 3

nb_execution_mode = "off"  # the committed outputs are the content; nbval checks that they are current
nb_merge_streams = True
# ipywidgets: the saved widget state (notebook metadata) rendered by @jupyter-widgets/html-manager's embed.js,
# which renders the standard widgets without require.js or a CDN
nb_ipywidgets_js = {"html-manager/embed.js": {}}

mathjax_path = "mathjax/tex-chtml.js"  # MathJax 3, relative to _static

html_theme = "sphinx_book_theme"
html_static_path = [str(ROOT / "build" / "book-vendor" / "static"), "_static"]
html_css_files = ["commlib-book.css"]
html_js_files = [("widgets-mathjax.js", {"defer": "defer", "priority": 900})]  # after MathJax (priority 500)
html_favicon = "_static/favicon.svg"
html_context = {"default_mode": "auto"}  # light or dark as the reader's system says
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": False,  # the title above the chapters leads home
    "show_toc_level": 2,
    "navbar_persistent": [],  # one search box, the primary sidebar's: the header repeated it beside it
    "use_download_button": True,  # the page's .ipynb, to run it
    "announcement": ("Run this page live: <code>python3 course.py lab</code> &nbsp;·&nbsp; "
                     "run every test: <code>python3 course.py test</code>"),
}

# Editions in other languages (book/i18n.py): one catalog per chapter, without source locations that would churn;
# book/build.py --lang stages locales/ into the sources and sets `language`.
gettext_compact = False
gettext_location = False
locale_dirs = ["locales/"]

# Each edition links to the same page of the other, published beside it: build/book/ and build/book-zh_CN/.
templates_path = ["_templates"]
html_sidebars = {"**": ["navbar-logo.html", "icon-links.html", "search-button-field.html", "sbt-sidebar-nav.html",
                        "edition.html"]}
EDITIONS = {None: ("book", "en", "English edition", "English"), "zh_CN": ("book-zh_CN", "zh-CN", "中文版", "中文版")}


def _edition(app, pagename, templatename, context, doctree):
    here = app.config.language if app.config.language in EDITIONS else None
    folder, hreflang, aria, label = EDITIONS["zh_CN" if here is None else None]
    up = "../" * pagename.count("/")
    context["commlib_edition"] = {"href": f"{up}../{folder}/{pagename}.html", "hreflang": hreflang, "aria": aria,
                                  "label": label}


def setup(app):
    app.connect("html-page-context", _edition)
    if app.config.language == "zh_CN":
        import logging

        app.config.html_title = "commlib：分布式训练中的通信开销"
        app.config.html_theme_options = {**html_theme_options, "announcement": (
            "在线运行本页：<code>python3 course.py lab --lang zh_CN</code> &nbsp;·&nbsp; "
            "运行全部测试：<code>python3 course.py test</code>")}

        import jieba  # Sphinx's Chinese search splits words with it; quiet its "Building prefix dict" lines
        from sphinx.search.zh import SearchChinese

        jieba.setLogLevel(logging.WARNING)
        # Sphinx 9.0.4 ends zh's language_data.js with `window.Stemmer = ChineseStemmer;`, a class it never ships
        # (zh stems Latin words with the English stemmer), so search stops on a ReferenceError: sphinx-doc/sphinx
        # issue 14229, fixed by pull request 14416 after 9.0.4. The JS class's name is built from language_name.
        if SearchChinese.js_stemmer_rawcode == "english-stemmer.js" and SearchChinese.language_name == "Chinese":
            SearchChinese.language_name = "English"
        # and a query in Chinese is cut into the words the index holds (Sphinx's splitter leaves it whole)
        SearchChinese.js_splitter_code = (Path(__file__).parent / "zh_splitter.js").read_text(encoding="utf-8")
