//! Text helpers shared by the markdown and the SVG: number formatting and escaping.

/// What a cell shows when there is no value.
pub(super) const NONE: &str = "—";

/// `v` rounded to `decimals` places, with thousands separators ("12,345", "1,234.5").
/// Not-finite values give [`NONE`].
pub(super) fn num(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return NONE.to_string();
    }
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text.as_str(), None),
    };
    let mut out = String::with_capacity(text.len() + text.len() / 3 + 1);
    let digits = int.len();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (digits - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    // "-0" after rounding is just "0".
    if v < 0.0 && out.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.insert(0, '-');
    }
    out
}

/// An integer count with thousands separators.
pub(super) fn int(v: u64) -> String {
    // u64 -> f64 loses precision above 2^53, so group the digits directly.
    let text = v.to_string();
    let digits = text.len();
    let mut out = String::with_capacity(digits + digits / 3);
    for (i, c) in text.chars().enumerate() {
        if i > 0 && (digits - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An optional value as [`num`], or [`NONE`].
pub(super) fn opt_num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| NONE.to_string(), |v| num(v, decimals))
}

/// A length in seconds from a benchmark file: "5", "0.5", "2.25".
pub(super) fn seconds(v: f64) -> String {
    if !v.is_finite() {
        return NONE.to_string();
    }
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// Free text on one line: line breaks and other control characters become spaces.
pub(super) fn one_line(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    mapped.trim().to_string()
}

/// Free text for a markdown table cell: one line, `|` escaped.
pub(super) fn cell(s: &str) -> String {
    one_line(s).replace('|', "\\|")
}

/// Free text for a markdown link's alternative text: one line, brackets escaped.
pub(super) fn alt(s: &str) -> String {
    let mut out = String::new();
    for c in one_line(s).chars() {
        if matches!(c, '\\' | '[' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Free text inline in a markdown paragraph or list item: characters that markdown
/// would read as markup are backslash-escaped.
pub(super) fn inline(s: &str) -> String {
    let mut out = String::new();
    for c in one_line(s).chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '!'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `s` as a markdown code span, whatever backticks it contains.
pub(super) fn code(s: &str) -> String {
    let s = one_line(s);
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest + 1);
    if longest > 0 || s.is_empty() {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

/// Text for XML content or an attribute value: `&`, `<`, `>`, `"`, `'` escaped, and
/// characters XML does not allow replaced by spaces.
pub(super) fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters of `s` (one line), with "…" when cut.
pub(super) fn truncate(s: &str, max: usize) -> String {
    let s = one_line(s);
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// "1 connection", "16 connections".
pub(super) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{} {}", int(n as u64), if n == 1 { one } else { many })
}

/// The protocol's name for prose.
pub(super) fn protocol_name(p: &str) -> String {
    match p {
        "pg" => "PostgreSQL".to_string(),
        "mysql" => "MySQL".to_string(),
        "hs" => "HandlerSocket".to_string(),
        other => one_line(other),
    }
}
