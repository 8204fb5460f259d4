//! The one way untrusted text enters a markdown report.
//!
//! Everything in a `results.json` was written by a run that executed pull-request code (bench
//! ids, notes, failure messages, log tails, host strings, commit subjects, e2e ids and arguments),
//! and the report is posted with a write token. Every such string goes through one of the
//! functions here, chosen by where it lands, and nowhere else:
//!
//! - [`text`]: prose, table cells, `<summary>` lines. Markup characters become character
//!   references (`&#42;`), which mean the literal character in markdown *and* inside an HTML
//!   block (a backslash escape does not work in `<details><summary>…`); `@` mentions, `#123`
//!   references and bare `http://`/`www.` links are broken with an invisible U+2060 word joiner
//!   after the `@` / `#` / `:` (GitHub links them after rendering, from the text, so a character
//!   reference alone would not stop them); control characters go; the length is capped.
//! - [`code`] / [`cell_code`]: an inline code span with a backtick run longer than any inside it
//!   (nothing in a code span is a link, mention or tag); in a table `|` is escaped, since GitHub
//!   splits cells before it parses code spans.
//! - [`fenced`]: a fenced block whose fence is longer than any backtick run in the lines, so no
//!   line can close it; control characters (ANSI colours) removed, each line and the number of
//!   lines capped ([`MAX_LINES`], the last ones kept).
//!
//! What comes from the harness itself (numbers, emoji, fixed words) is not passed through here.
//! Tests with a hostile `results.json` are in `harness/tests/post_mock.rs` (the posted body is
//! parsed with pulldown-cmark: no link, image or HTML of the report's making but its own) and
//! below.

/// One untrusted string is cut to this many characters in prose or a cell (a bench id, a note,
/// a message): long enough for any real one, short enough that one cannot fill a comment.
pub const MAX_TEXT: usize = 2000;

/// At most this many lines go into one fenced block (the callers show far fewer: log tails of
/// 12-30 lines, a few reproduce commands).
pub const MAX_LINES: usize = 200;

/// An invisible character that breaks a mention, reference or autolink without showing.
const JOINER: char = '\u{2060}';

/// Prose or a table cell: see the module docs.
pub fn text(s: &str) -> String {
    let s = cap(s, MAX_TEXT);
    let mut out = String::with_capacity(s.len() + s.len() / 4);
    let mut prev: Option<char> = None;
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() || is_bidi_control(c) => {}
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            // Markdown's punctuation: as numeric references, which work in HTML blocks too.
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '~' | '$' | '!' | '=' | '+' | '-'
                if is_markup(c, prev, chars.get(i + 1).copied()) =>
            {
                out.push_str(&format!("&#{};", c as u32));
            }
            '@' | '#' => {
                out.push(c);
                out.push(JOINER);
            }
            // `GH-123` is a cross-reference too.
            '-' if i >= 2
                && chars[i - 2..i]
                    .iter()
                    .collect::<String>()
                    .eq_ignore_ascii_case("gh")
                && chars.get(i + 1).is_some_and(char::is_ascii_digit) =>
            {
                out.push('-');
                out.push(JOINER);
            }
            ':' if chars.get(i + 1) == Some(&'/') => {
                out.push(':');
                out.push(JOINER);
            }
            '.' if i >= 3 && chars[i - 3..i].iter().all(|c| c.eq_ignore_ascii_case(&'w')) => {
                out.push(JOINER);
                out.push('.');
            }
            c => out.push(c),
        }
        prev = Some(c);
    }
    out
}

/// Whether `c` (between `prev` and `next`) could start or end markup. The characters that are
/// markup anywhere always are (`$` included: GitHub renders `$…$` as math); `-`, `+` and `=`
/// only at the very start, where they could begin a list item or a setext underline (the text
/// is one line: line breaks became spaces), and `!` only before `[` (an image), so
/// "fp32-vs-fp16", "--require-cuda" and "a=1" stay readable. Parentheses are left alone: with
/// `[` and `]` escaped, no link can form around them.
fn is_markup(c: char, prev: Option<char>, next: Option<char>) -> bool {
    match c {
        '-' | '+' | '=' => prev.is_none(),
        '!' => next == Some('['),
        _ => true,
    }
}

/// Characters that reorder the text around them when shown (the "Trojan Source" set).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// The first `max` characters of `s`, with `…` when cut.
pub fn cap(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Control characters (ANSI colour sequences included) and bidi overrides removed; a line break
/// or tab becomes a space. Also what the terminal report shows of untrusted text.
pub fn plain(s: &str) -> String {
    super::strip_ansi(s)
        .chars()
        .filter_map(|c| match c {
            '\n' | '\r' | '\t' => Some(' '),
            c if c.is_control() || is_bidi_control(c) => None,
            c => Some(c),
        })
        .collect()
}

/// The longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// An inline code span around untrusted text, on one line.
pub fn code(s: &str) -> String {
    let s = plain(&cap(s, MAX_TEXT));
    let ticks = "`".repeat(longest_backtick_run(&s) + 1);
    // A space on each side when the content starts or ends with a backtick (CommonMark strips
    // one space from each side of such a span).
    if s.starts_with('`') || s.ends_with('`') || s.is_empty() {
        format!("{ticks} {s} {ticks}")
    } else {
        format!("{ticks}{s}{ticks}")
    }
}

/// A code span inside a table cell: GitHub splits cells at `|` even inside code.
pub fn cell_code(s: &str) -> String {
    code(s).replace('|', "\\|")
}

/// A fenced code block around untrusted lines: each line made plain and cut to `width`
/// characters, at most `max_lines` lines (the last ones), the fence longer than any backtick
/// run inside. `indent` goes before every line (inside a list item).
pub fn fenced(info: &str, lines: &[String], indent: &str) -> String {
    let lines: Vec<String> = lines[lines.len().saturating_sub(MAX_LINES)..]
        .iter()
        .map(|l| plain(&cap(l, MAX_TEXT)))
        .collect();
    let longest = lines
        .iter()
        .map(|l| longest_backtick_run(l))
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let mut out = format!("{indent}{fence}{info}\n");
    for l in &lines {
        out.push_str(indent);
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(indent);
    out.push_str(&fence);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_html_become_references() {
        let t = text("<img src=x onerror=alert(1)> **bold** [a](http://evil) `x` |");
        assert!(!t.contains('<') && !t.contains('>'), "{t}");
        assert!(!t.contains("**") && !t.contains("](") && !t.contains('`'));
        assert!(!t.contains('|'));
        assert!(t.contains("&lt;img"), "{t}");
    }

    #[test]
    fn mentions_references_and_links_are_broken() {
        let t = text(
            "ping @octocat and @acme/team about #12, see https://evil.example and www.evil.example",
        );
        assert!(!t.contains("@octocat") && !t.contains("@acme"));
        assert!(!t.contains("#12"));
        assert!(!t.contains("https://") && !t.contains("www."), "{t}");
        // Still reads the same.
        assert_eq!(
            t.replace(JOINER, ""),
            "ping @octocat and @acme/team about #12, see https://evil.example and www.evil.example"
        );
    }

    #[test]
    fn ordinary_text_reads_as_written() {
        assert_eq!(
            text("fp32-vs-fp16 a=1 done! --require-cuda (1 introduced)"),
            "fp32-vs-fp16 a=1 done! --require-cuda (1 introduced)"
        );
        assert_eq!(text("- list"), "&#45; list");
        assert_eq!(
            text("costs $5 or $$x$$"),
            "costs &#36;5 or &#36;&#36;x&#36;&#36;"
        );
    }

    #[test]
    fn gh_references_are_broken_too() {
        let t = text("see GH-123 and gh-7, not GH-x");
        assert!(!t.contains("GH-123") && !t.contains("gh-7"), "{t}");
        assert!(t.contains("GH-x"));
    }

    #[test]
    fn control_and_bidi_characters_go_and_length_is_capped() {
        assert_eq!(text("a\u{1b}[31mb\u{202E}c\nd"), "a&#91;31mbc d");
        let long = text(&"x".repeat(MAX_TEXT + 50));
        assert_eq!(long.chars().count(), MAX_TEXT + 1);
    }

    #[test]
    fn code_spans_outlast_backtick_runs() {
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("a ``b`` c"), "```a ``b`` c```");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(cell_code("a|b"), "`a\\|b`");
    }

    #[test]
    fn fences_outlast_the_lines_inside() {
        let f = fenced(
            "text",
            &["```".into(), "\u{1b}[1mbold\u{1b}[0m".into()],
            "  ",
        );
        assert!(f.starts_with("  ````text\n"), "{f}");
        assert!(f.contains("\n  bold\n"), "{f}");
        assert!(f.ends_with("  ````\n"));
    }
}
