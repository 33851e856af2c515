//! Tokenizer: words, quoted strings, punctuation; comments and whitespace skipped.

/// One token, borrowing the query text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token<'a> {
    /// An unquoted word (keyword or identifier), as written.
    Word(&'a [u8]),
    /// A double-quoted identifier, without the quotes (doubled quotes left as they are).
    Quoted(&'a [u8]),
    /// A string literal (any quoting), with its quotes.
    Str(&'a [u8]),
    Number(&'a [u8]),
    /// `;` ends a statement.
    Semicolon,
    Punct(u8),
}

impl<'a> Token<'a> {
    /// Case-insensitive match of a word.
    pub fn is(&self, kw: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(kw.as_bytes()))
    }

    /// The identifier a word or quoted identifier names (words lowercased).
    pub fn ident(&self) -> Option<String> {
        match self {
            Token::Word(w) => Some(String::from_utf8_lossy(w).to_ascii_lowercase()),
            Token::Quoted(q) => Some(String::from_utf8_lossy(q).into_owned()),
            _ => None,
        }
    }
}

/// Which SQL dialect's quoting and comment rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// `'...'` strings, `"..."` identifiers, `$tag$` strings, nested `/* */` comments.
    #[default]
    Postgres,
    /// `'...'` and `"..."` strings with backslash escapes, `` `...` `` identifiers, `#`
    /// and `-- ` comments, and `/*! ... */` comments whose content is code.
    MySql,
}

/// Iterator over the tokens of a query string.
pub struct Tokens<'a> {
    s: &'a [u8],
    i: usize,
    dialect: Dialect,
    /// Inside a MySQL executable comment (`/*! ... */`): its `*/` is skipped.
    exec_comment: bool,
}

impl<'a> Tokens<'a> {
    pub fn new(s: &'a [u8]) -> Self {
        Tokens::new_in(s, Dialect::Postgres)
    }

    pub fn new_in(s: &'a [u8], dialect: Dialect) -> Self {
        Tokens {
            s,
            i: 0,
            dialect,
            exec_comment: false,
        }
    }

    /// Byte offset of the next token (after skipping nothing yet).
    pub fn offset(&self) -> usize {
        self.i
    }

    /// The next token with its byte range in the text.
    pub fn next_spanned(&mut self) -> Option<(Token<'a>, std::ops::Range<usize>)> {
        self.skip_space_and_comments();
        let start = self.i;
        let t = self.token()?;
        Some((t, start..self.i))
    }

    fn skip_space_and_comments(&mut self) {
        loop {
            self.i += run(self.s.get(self.i..).unwrap_or_default(), SPACE);
            // Most tokens start with no comment before them.
            if !matches!(self.s.get(self.i), Some(b'-' | b'/' | b'#' | b'*')) || !self.comment() {
                return;
            }
        }
    }

    /// Skips the comment at `self.i`, if one starts there.
    #[inline(never)]
    fn comment(&mut self) -> bool {
        let s = self.s;
        let rest = &s[self.i..];
        if self.dialect == Dialect::MySql {
            if self.exec_comment && rest.starts_with(b"*/") {
                self.exec_comment = false;
                self.i += 2;
                return true;
            }
            let exec = rest.starts_with(b"/*!") || rest.starts_with(b"/*M!");
            if exec {
                // The content runs (on servers of at least the version given).
                self.i += if rest[2] == b'!' { 3 } else { 4 };
                while self.i < s.len() && s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                self.exec_comment = true;
                return true;
            }
            let dash = rest.starts_with(b"--")
                && rest
                    .get(2)
                    .is_none_or(|c| c.is_ascii_whitespace() || c.is_ascii_control());
            if rest.starts_with(b"#") || dash {
                while self.i < s.len() && s[self.i] != b'\n' {
                    self.i += 1;
                }
                return true;
            }
            if rest.starts_with(b"/*") {
                // Not nested in MySQL.
                self.i = memfind(&s[self.i + 2..], b"*/").map_or(s.len(), |p| self.i + 2 + p + 2);
                return true;
            }
            return false;
        }
        if rest.starts_with(b"--") {
            while self.i < s.len() && s[self.i] != b'\n' {
                self.i += 1;
            }
            true
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            while self.i < s.len() {
                if s[self.i..].starts_with(b"/*") {
                    depth += 1;
                    self.i += 2;
                } else if s[self.i..].starts_with(b"*/") {
                    depth -= 1;
                    self.i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    self.i += 1;
                }
            }
            true
        } else {
            false
        }
    }

    fn quoted(&mut self, q: u8, backslash: bool) -> usize {
        self.i = quoted_end(self.s, self.i, q, backslash).unwrap_or(self.s.len());
        self.i
    }

    /// `$tag$ ... $tag$` starting at self.i, if it is one.
    fn dollar(&mut self) -> Option<usize> {
        let s = self.s;
        let start = self.i;
        let mut j = start + 1;
        while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
            j += 1;
        }
        if j >= s.len() || s[j] != b'$' || s.get(start + 1).is_some_and(|c| c.is_ascii_digit()) {
            return None;
        }
        let tag = &s[start..=j];
        let body = j + 1;
        let end = memfind(&s[body..], tag).map_or(s.len(), |p| body + p + tag.len());
        self.i = end;
        Some(end)
    }
}

/// The end of the quoted run starting at `i` (quote `q`; a doubled quote stays inside,
/// and with `backslash` a backslash escapes the next byte), or None if it is not closed.
pub(crate) fn quoted_end(s: &[u8], mut i: usize, q: u8, backslash: bool) -> Option<usize> {
    i += 1;
    while i < s.len() {
        let c = s[i];
        if backslash && c == b'\\' {
            i += 2;
            continue;
        }
        i += 1;
        if c == q {
            if s.get(i) == Some(&q) {
                i += 1;
                continue;
            }
            return Some(i);
        }
    }
    None
}

fn memfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Byte classes, looked up once per byte: the scanner runs on every statement.
pub(crate) const WORD: u8 = 1;
pub(crate) const SPACE: u8 = 2;
const CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80 {
            t[c] = WORD;
        }
        if b.is_ascii_whitespace() {
            t[c] = SPACE;
        }
        c += 1;
    }
    t
};

pub(crate) fn class(c: u8) -> u8 {
    CLASSES[usize::from(c)]
}

/// How many bytes at the start of `s` are of class `of`.
pub(crate) fn run(s: &[u8], of: u8) -> usize {
    s.iter()
        .position(|&c| class(c) & of == 0)
        .unwrap_or(s.len())
}

fn is_word_byte(c: u8) -> bool {
    class(c) & WORD != 0
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        self.skip_space_and_comments();
        self.token()
    }
}

impl<'a> Tokens<'a> {
    /// The token at `self.i` (spaces and comments skipped before).
    fn token(&mut self) -> Option<Token<'a>> {
        let s = self.s;
        let start = self.i;
        let c = *s.get(start)?;
        // Most tokens are words: a letter or `_` (not `$`, a digit or a string's `e'`).
        if class(c) & WORD != 0
            && !c.is_ascii_digit()
            && c != b'$'
            && !(c | 0x20 == b'e' && s.get(start + 1) == Some(&b'\''))
        {
            self.i += 1 + run(&s[start + 1..], WORD);
            return Some(Token::Word(&s[start..self.i]));
        }
        self.other(start, c)
    }

    /// A token that is not a plain word.
    #[inline(never)]
    fn other(&mut self, start: usize, c: u8) -> Option<Token<'a>> {
        let s = self.s;
        if self.dialect == Dialect::MySql {
            match c {
                b'\'' | b'"' => return Some(Token::Str(&s[start..self.quoted(c, true)])),
                b'`' => {
                    let end = self.quoted(b'`', false);
                    return Some(Token::Quoted(
                        &s[start + 1..end.saturating_sub(1).max(start + 1)],
                    ));
                }
                b'$' => {
                    while self.i < s.len() && is_word_byte(s[self.i]) {
                        self.i += 1;
                    }
                    return Some(Token::Word(&s[start..self.i]));
                }
                b'e' | b'E' if s.get(start + 1) == Some(&b'\'') => {
                    while self.i < s.len() && is_word_byte(s[self.i]) {
                        self.i += 1;
                    }
                    return Some(Token::Word(&s[start..self.i]));
                }
                _ => {}
            }
        }
        let tok = match c {
            b'\'' => Token::Str(&s[start..self.quoted(b'\'', false)]),
            b'"' => {
                let end = self.quoted(b'"', false);
                Token::Quoted(&s[start + 1..end.saturating_sub(1).max(start + 1)])
            }
            b'$' => match self.dollar() {
                Some(end) => Token::Str(&s[start..end]),
                None => {
                    self.i += 1;
                    while self.i < s.len() && s[self.i].is_ascii_digit() {
                        self.i += 1;
                    }
                    Token::Punct(b'$')
                }
            },
            b'e' | b'E' if s.get(start + 1) == Some(&b'\'') => {
                self.i += 1;
                let end = self.quoted(b'\'', true);
                Token::Str(&s[start..end])
            }
            b';' => {
                self.i += 1;
                Token::Semicolon
            }
            c if c.is_ascii_digit() => {
                while self.i < s.len() && (s[self.i].is_ascii_alphanumeric() || s[self.i] == b'.') {
                    self.i += 1;
                }
                Token::Number(&s[start..self.i])
            }
            c if is_word_byte(c) => {
                self.i += 1 + run(&s[start + 1..], WORD);
                Token::Word(&s[start..self.i])
            }
            c => {
                self.i += 1;
                Token::Punct(c)
            }
        };
        Some(tok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_in(s: &str, dialect: Dialect) -> Vec<String> {
        Tokens::new_in(s.as_bytes(), dialect)
            .map(|t| match t {
                Token::Word(w) | Token::Quoted(w) | Token::Str(w) | Token::Number(w) => {
                    String::from_utf8_lossy(w).into_owned()
                }
                Token::Semicolon => ";".into(),
                Token::Punct(c) => char::from(c).to_string(),
            })
            .collect()
    }

    fn words(s: &str) -> Vec<String> {
        words_in(s, Dialect::Postgres)
    }

    fn my_words(s: &str) -> Vec<String> {
        words_in(s, Dialect::MySql)
    }

    #[test]
    fn skips_comments_and_quotes() {
        assert_eq!(
            words("/* a /* b */ c */ SET x -- no\n= 'a;b'"),
            ["SET", "x", "=", "'a;b'"]
        );
        assert_eq!(
            words("select $q$ ; $q$ ; E'\\'';"),
            ["select", "$q$ ; $q$", ";", "E'\\''", ";"]
        );
        assert_eq!(words("\"My \"\"T\"\"\" $1"), ["My \"\"T\"\"", "$"]);
    }

    #[test]
    fn mysql_quoting_and_comments() {
        assert_eq!(
            my_words("SET @a = 'x\\';y' # c ; d\n; select `a``;b`, \"q;\" -- e;\n"),
            [
                "SET", "@", "a", "=", "'x\\';y'", ";", "select", "a``;b", ",", "\"q;\""
            ]
        );
        assert_eq!(
            my_words("/*!40101 SET NAMES utf8 */; /* x; */ --x"),
            ["SET", "NAMES", "utf8", ";", "-", "-", "x"]
        );
        for s in ["'abc\\", "`x", "/*! x", "/* x", "#", "\"\\"] {
            let _ = my_words(s);
        }
    }

    #[test]
    fn never_panics_on_unterminated() {
        for s in ["'abc", "\"abc", "$a$ x", "/* x", "E'\\", "$", "--"] {
            let _ = words(s);
        }
    }
}
