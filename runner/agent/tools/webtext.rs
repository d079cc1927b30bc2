//! The text of a page `WebFetch` fetched, bounded. The page is attacker-controlled (a model or a
//! planted URL chooses it), and `html2text` (html5ever's tree, then a recursive render) takes
//! super-linear time in the nesting depth: 400k unclosed `<div>`s (a 2 MiB body) ran for
//! minutes. So a linear scan ([`shape`]) measures the page first; past [`MAX_DEPTH`] levels or
//! [`MAX_ELEMENTS`] elements `html2text` is not run and the tags are stripped instead
//! ([`strip`], also linear). Either runs on tokio's blocking pool, under a time budget
//! ([`page_text`]): past it the stripped text is returned and the conversion, holding only
//! its copy of the body, finishes in the background.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Nesting depth past which `html2text` is not run. Real pages stay well under 100 (the scan
/// does not count elements whose end tag the parser implies, like `p`, `li`, `td`).
pub(super) const MAX_DEPTH: usize = 256;
/// Elements past which `html2text` is not run.
pub(super) const MAX_ELEMENTS: usize = 100_000;

/// Why a page's tags were stripped instead of converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fallback {
    /// Nested deeper than [`MAX_DEPTH`].
    Deep,
    /// More than [`MAX_ELEMENTS`] elements.
    Many,
    /// The conversion did not finish within the budget.
    Overran(Duration),
    /// `html2text` failed or panicked.
    Broken,
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self {
            Fallback::Deep => format!("这个页面的 HTML 嵌套超过 {MAX_DEPTH} 层"),
            Fallback::Many => format!("这个页面的 HTML 元素超过 {MAX_ELEMENTS} 个"),
            Fallback::Overran(d) => {
                format!("HTML 转成文本 {:.1} 秒内没转完", d.as_secs_f64())
            }
            Fallback::Broken => "HTML 转成文本出错".to_string(),
        };
        write!(f, "[{why},没按 HTML 转换:下面是去掉标签的纯文本]")
    }
}

/// A page as text, and why it was stripped rather than converted, if it was.
#[derive(Debug)]
pub(super) struct PageText {
    pub text: String,
    pub fallback: Option<Fallback>,
}

/// What the scan saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    /// The deepest nesting seen (the scan stops once past [`MAX_DEPTH`]).
    pub depth: usize,
    /// Start tags seen.
    pub elements: usize,
}

/// Elements that hold no content.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "keygen", "frame", "basefont", "bgsound",
];
/// Elements whose previous sibling of the kind the parser closes (`<p><p>` are siblings): they
/// nest only through another, counted element (a list, a table), so they are not counted.
const IMPLIED: &[&str] = &[
    "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "tbody", "thead", "tfoot",
    "colgroup", "caption", "rb", "rt", "rp", "rtc", "html", "head", "body",
];
/// Elements whose content is text up to their end tag.
const RAW: &[&str] = &[
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "plaintext",
];
/// Elements whose start and end become a line break in the stripped text.
const BLOCK: &[&str] = &[
    "br",
    "p",
    "div",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "table",
    "pre",
    "blockquote",
    "hr",
    "section",
    "article",
    "header",
    "footer",
    "dt",
    "dd",
    "title",
];

/// One tag at `html[at]` (`<`).
enum Tag {
    /// A start tag: its lowercase name, whether it ends in `/>`, and the index past it.
    Start(String, bool, usize),
    /// An end tag.
    End(String, usize),
    /// A comment, doctype or processing instruction.
    Other(usize),
    /// A `<` that starts no tag.
    Text,
}

/// The tag at `html[at]` (which is `<`); linear in its length.
fn tag(html: &[u8], at: usize) -> Tag {
    let rest = &html[at + 1..];
    if rest.starts_with(b"!--") {
        let end = find(rest, 3, b"-->").map_or(html.len(), |e| at + 1 + e + 3);
        return Tag::Other(end);
    }
    let (end_tag, from) = match rest.first() {
        Some(b'/') => (true, 1),
        Some(b'!' | b'?') => return Tag::Other(past_gt(html, at + 1)),
        Some(_) => (false, 0),
        None => return Tag::Text,
    };
    let name_len = rest[from..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b':' | b'_' | b'.'))
        .count();
    if name_len == 0 || !rest[from].is_ascii_alphabetic() {
        return Tag::Text;
    }
    let name = String::from_utf8_lossy(&rest[from..from + name_len]).to_ascii_lowercase();
    let end = past_gt(html, at + 1 + from + name_len);
    if end_tag {
        Tag::End(name, end)
    } else {
        let closed = end >= 2 && html.get(end - 1) == Some(&b'>') && html[end - 2] == b'/';
        Tag::Start(name, closed, end)
    }
}

/// The index past the `>` that ends the tag whose attributes start at `from` (`>` inside a
/// quoted attribute value does not end it), or the end.
fn past_gt(html: &[u8], from: usize) -> usize {
    let mut quote = None;
    let mut after_eq = false;
    for (i, &b) in html.iter().enumerate().skip(from) {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'>' => return i + 1,
            None if after_eq && (b == b'"' || b == b'\'') => quote = Some(b),
            None => {}
        }
        if quote.is_none() && !b.is_ascii_whitespace() {
            after_eq = b == b'=';
        }
    }
    html.len()
}

/// Where `needle` starts in `hay` at or after `from`.
fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The index past the end tag of raw-text element `name`, searched from `from`.
fn past_raw(html: &[u8], from: usize, name: &str) -> usize {
    let mut i = from;
    while let Some(p) = find(html, i, b"</") {
        let n = &html[p + 2..];
        if n.len() >= name.len() && n[..name.len()].eq_ignore_ascii_case(name.as_bytes()) {
            return past_gt(html, p + 2 + name.len());
        }
        i = p + 2;
    }
    html.len()
}

/// The page's nesting depth and element count, by one linear pass that keeps an open-element
/// stack the way the parser roughly does: an end tag closes up to its element when one is open
/// (else it is ignored), `/>` closes only inside `svg` or `math`.
pub(super) fn shape(html: &[u8]) -> Shape {
    let mut stack: Vec<String> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    let mut shape = Shape {
        depth: 0,
        elements: 0,
    };
    let mut i = 0;
    while let Some(p) = html[i..].iter().position(|&b| b == b'<').map(|p| p + i) {
        i = match tag(html, p) {
            Tag::Text => p + 1,
            Tag::Other(end) => end,
            Tag::End(name, end) => {
                if open.get(&name).copied().unwrap_or(0) > 0 {
                    while let Some(top) = stack.pop() {
                        let done = top == name;
                        if let Some(n) = open.get_mut(&top) {
                            *n -= 1;
                        }
                        if done {
                            break;
                        }
                    }
                }
                end
            }
            Tag::Start(name, closed, end) => {
                shape.elements += 1;
                let foreign = ["svg", "math"]
                    .iter()
                    .any(|f| open.get(*f).copied().unwrap_or(0) > 0);
                if RAW.contains(&name.as_str()) {
                    past_raw(html, end, &name)
                } else {
                    let leaf = VOID.contains(&name.as_str())
                        || IMPLIED.contains(&name.as_str())
                        || (closed && foreign);
                    if !leaf {
                        *open.entry(name.clone()).or_insert(0) += 1;
                        stack.push(name);
                        shape.depth = shape.depth.max(stack.len());
                        if shape.depth > MAX_DEPTH {
                            return shape;
                        }
                    }
                    end
                }
            }
        };
    }
    shape
}

/// The page's text with its tags stripped, in one linear pass: script and style contents and
/// comments dropped, block elements on their own lines, whitespace collapsed, the entities
/// `&lt; &gt; &amp; &quot; &#39; &apos; &nbsp;` and numeric ones decoded.
pub(super) fn strip(html: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(html.len() / 2);
    // Pending whitespace: None, a space, or a line break.
    let mut gap: Option<u8> = None;
    let mut i = 0;
    let push = |out: &mut Vec<u8>, gap: &mut Option<u8>, bytes: &[u8]| {
        if let Some(g) = gap.take() {
            if !out.is_empty() {
                out.push(g);
            }
        }
        out.extend_from_slice(bytes);
    };
    while i < html.len() {
        let b = html[i];
        if b == b'<' {
            i = match tag(html, i) {
                Tag::Text => {
                    push(&mut out, &mut gap, b"<");
                    i + 1
                }
                Tag::Other(end) => end,
                Tag::End(name, end) | Tag::Start(name, _, end) => {
                    if BLOCK.contains(&name.as_str()) {
                        gap = Some(b'\n');
                    }
                    let raw = matches!(html.get(i + 1), Some(c) if *c != b'/')
                        && RAW.contains(&name.as_str());
                    if raw && name != "title" && name != "textarea" {
                        past_raw(html, end, &name)
                    } else {
                        end
                    }
                }
            };
        } else if b.is_ascii_whitespace() {
            if gap != Some(b'\n') {
                gap = Some(if b == b'\n' { b'\n' } else { b' ' });
            }
            i += 1;
        } else if b == b'&' {
            let (decoded, len) = entity(&html[i..]);
            let mut buf = [0u8; 4];
            push(&mut out, &mut gap, decoded.encode_utf8(&mut buf).as_bytes());
            i += len;
        } else {
            push(&mut out, &mut gap, &[b]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The character an entity at the start of `s` (`&`) stands for and its length; `&` itself
/// (length 1) when it is none this knows.
fn entity(s: &[u8]) -> (char, usize) {
    let Some(semi) = s.iter().take(12).position(|&b| b == b';') else {
        return ('&', 1);
    };
    let body = &s[1..semi];
    let c = match body {
        b"lt" => Some('<'),
        b"gt" => Some('>'),
        b"amp" => Some('&'),
        b"quot" => Some('"'),
        b"apos" => Some('\''),
        b"nbsp" => Some(' '),
        [b'#', b'x' | b'X', hex @ ..] => std::str::from_utf8(hex)
            .ok()
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .and_then(char::from_u32),
        [b'#', dec @ ..] => std::str::from_utf8(dec)
            .ok()
            .and_then(|d| d.parse::<u32>().ok())
            .and_then(char::from_u32),
        _ => None,
    };
    c.map_or(('&', 1), |c| (c, semi + 1))
}

/// The page as text, synchronously: converted by `html2text` when [`shape`] is within bounds,
/// else stripped.
pub(super) fn convert(html: &[u8]) -> PageText {
    let s = shape(html);
    let fallback = if s.depth > MAX_DEPTH {
        Fallback::Deep
    } else if s.elements > MAX_ELEMENTS {
        Fallback::Many
    } else {
        match html2text::from_read(html, 100) {
            Ok(text) => {
                return PageText {
                    text,
                    fallback: None,
                }
            }
            Err(_) => Fallback::Broken,
        }
    };
    PageText {
        text: strip(html),
        fallback: Some(fallback),
    }
}

/// The page as text, off the async workers ([`convert`] on the blocking pool) and within
/// `budget`: past it, the stripped text (the conversion goes on in the background, holding
/// only `html`).
pub(super) async fn page_text(html: Arc<[u8]>, budget: Duration) -> PageText {
    let page = html.clone();
    let job = tokio::task::spawn_blocking(move || convert(&page));
    let fallback = match tokio::time::timeout(budget, job).await {
        Ok(Ok(page)) => return page,
        Ok(Err(_)) => Fallback::Broken,
        Err(_) => Fallback::Overran(budget),
    };
    let text = tokio::task::spawn_blocking(move || strip(&html))
        .await
        .unwrap_or_default();
    PageText {
        text,
        fallback: Some(fallback),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of `levels` unclosed `tag`s around a text.
    fn nested(levels: usize, tag: &str) -> Vec<u8> {
        let mut page = b"<html><body>".to_vec();
        for _ in 0..levels {
            page.extend_from_slice(format!("<{tag}>").as_bytes());
        }
        page.extend_from_slice(b"deep &lt;text&gt;");
        page
    }

    #[test]
    fn a_page_past_the_depth_limit_is_stripped_not_converted() {
        // A 2 MiB body of unclosed `<div>`s: html2text took hours on it (debug build).
        let page = nested(400_000, "div");
        let got = convert(&page);
        assert_eq!(got.fallback, Some(Fallback::Deep));
        assert_eq!(got.text, "deep <text>");
        let got = convert(&nested(MAX_DEPTH + 1, "div"));
        assert_eq!(got.fallback, Some(Fallback::Deep));
        // `<div/>` opens a div in HTML.
        assert_eq!(
            convert(&nested(MAX_DEPTH + 1, "div/")).fallback,
            Some(Fallback::Deep)
        );
    }

    #[test]
    fn a_page_at_the_limits_goes_through_html2text_unchanged() {
        let page = b"<html><head><title>T</title><style>p{}</style></head><body>\
            <h1>Title</h1><p>One &amp; <b>two</b><p>three<ul><li>a<li>b</ul>\
            <table><tr><td>x<td>y</table><a href=\"/x?a=1&b=>\">link</a></body></html>";
        let got = convert(page);
        assert_eq!(got.fallback, None);
        assert_eq!(got.text, html2text::from_read(&page[..], 100).unwrap());
        let deep = nested(MAX_DEPTH, "div");
        let got = convert(&deep);
        assert_eq!(got.fallback, None);
        assert_eq!(got.text, html2text::from_read(&deep[..], 100).unwrap());
    }

    #[test]
    fn too_many_elements_are_stripped() {
        let page = b"<span>a</span>".repeat(MAX_ELEMENTS + 1);
        let got = convert(&page);
        assert_eq!(got.fallback, Some(Fallback::Many));
        assert_eq!(got.text, "a".repeat(MAX_ELEMENTS + 1));
    }

    #[test]
    fn the_scan_counts_what_the_parser_nests() {
        let depth = |html: &str| shape(html.as_bytes()).depth;
        // Implied end tags, void elements, closed elements: no depth.
        assert_eq!(depth("<p>a<p>b<p>c<li>d<li>e<br><img src=x>"), 0);
        assert_eq!(depth("<div><span>a</div><div><span>b</div>"), 2);
        // An end tag with nothing open of its name is ignored.
        assert_eq!(depth("</div></div><div><div>"), 2);
        // `/>` closes in SVG, not in HTML.
        assert_eq!(depth("<svg><path/><path/><g/></svg>"), 1);
        assert_eq!(depth("<div/><div/><div/>"), 3);
        // Comments, scripts and quoted `>` hide no tags.
        assert_eq!(depth("<!-- <div><div> --><script>'<div><div>'</script>"), 0);
        assert_eq!(depth("<a title=\"x>y\"><b>"), 2);
        assert_eq!(shape(b"<i>a</i><i>b</i><br>").elements, 3);
    }

    #[test]
    fn stripping_keeps_the_text() {
        let page = b"<html><head><script>var a = '<b>';</script><style>p{}</style></head>\
            <body><h1>Title</h1>\n\n<p>One   &amp;  <b>two</b> &quot;q&quot; &#39;s&#39; &#x41;&#66; &zz; &\
            <!-- hidden --><div>3 &lt; 4 &gt; 2</div></body>";
        assert_eq!(
            strip(page),
            "Title\nOne & two \"q\" 's' AB &zz; &\n3 < 4 > 2"
        );
    }

    #[tokio::test]
    async fn the_conversion_runs_off_the_runtime_within_its_budget() {
        // A flat 2 MiB page within the limits takes html2text seconds (debug build). On this
        // single-threaded runtime an inline conversion would return before the timer is polled.
        let page: Arc<[u8]> = b"<p>ab</p>".repeat(230_000).into();
        let got = page_text(page, Duration::ZERO).await;
        assert_eq!(got.fallback, Some(Fallback::Overran(Duration::ZERO)));
        assert!(got.text.starts_with("ab\nab\n"), "{}", &got.text[..20]);
        let got = page_text(nested(400_000, "div").into(), Duration::from_secs(60)).await;
        assert_eq!(got.fallback, Some(Fallback::Deep));
        let got = page_text(b"<p>hi</p>"[..].into(), Duration::from_secs(60)).await;
        assert_eq!((got.text.as_str(), got.fallback), ("hi\n", None));
    }
}
