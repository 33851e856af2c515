//! Statement facts for rules, the firewall and digests: one pass over the tokens gives a
//! statement's kind, its digest text (literals, numbers, placeholders and IN lists of any
//! length folded to `?`, comments dropped, whitespace normalised), a 64-bit digest id, and
//! the tables it names. No parse: the table names are read after the words that introduce
//! them (FROM, JOIN, UPDATE, INTO, TABLE, ...), as written (`schema.table` where
//! qualified). A statement the scanner cannot place is of kind [`Kind::Other`].

use crate::lex::{Dialect, Token, Tokens};

/// What a statement is, for rules' `kind` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Select,
    Insert,
    Update,
    Delete,
    /// CREATE, ALTER, DROP, TRUNCATE, RENAME, COMMENT, GRANT, REVOKE.
    Ddl,
    /// BEGIN, START, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, END, ABORT.
    Transaction,
    /// SET, RESET, USE.
    Set,
    /// SHOW, EXPLAIN, DESCRIBE.
    Show,
    /// CALL, DO, EXECUTE.
    Call,
    /// COPY, LOAD.
    Copy,
    Other,
}

impl Kind {
    /// Every kind with its name in the configuration.
    pub const ALL: &'static [(&'static str, Kind)] = &[
        ("select", Kind::Select),
        ("insert", Kind::Insert),
        ("update", Kind::Update),
        ("delete", Kind::Delete),
        ("ddl", Kind::Ddl),
        ("transaction", Kind::Transaction),
        ("set", Kind::Set),
        ("show", Kind::Show),
        ("call", Kind::Call),
        ("copy", Kind::Copy),
        ("other", Kind::Other),
    ];

    pub fn name(self) -> &'static str {
        Kind::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("other", |(n, _)| n)
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// Whether a statement of this kind may change data or schema (a write for table
    /// rules and routes). Unknown statements are writes.
    pub fn writes(self) -> bool {
        !matches!(self, Kind::Select | Kind::Show)
    }

    pub(crate) fn of_first_word(w: &Token<'_>) -> Option<Kind> {
        const WORDS: &[(&str, Kind)] = &[
            ("select", Kind::Select),
            ("values", Kind::Select),
            ("table", Kind::Select),
            ("insert", Kind::Insert),
            ("replace", Kind::Insert),
            ("update", Kind::Update),
            ("merge", Kind::Update),
            ("delete", Kind::Delete),
            ("create", Kind::Ddl),
            ("alter", Kind::Ddl),
            ("drop", Kind::Ddl),
            ("truncate", Kind::Ddl),
            ("rename", Kind::Ddl),
            ("comment", Kind::Ddl),
            ("grant", Kind::Ddl),
            ("revoke", Kind::Ddl),
            ("begin", Kind::Transaction),
            ("start", Kind::Transaction),
            ("commit", Kind::Transaction),
            ("rollback", Kind::Transaction),
            ("savepoint", Kind::Transaction),
            ("release", Kind::Transaction),
            ("end", Kind::Transaction),
            ("abort", Kind::Transaction),
            ("set", Kind::Set),
            ("reset", Kind::Set),
            ("use", Kind::Set),
            ("show", Kind::Show),
            ("explain", Kind::Show),
            ("describe", Kind::Show),
            ("desc", Kind::Show),
            ("call", Kind::Call),
            ("do", Kind::Call),
            ("execute", Kind::Call),
            ("copy", Kind::Copy),
            ("load", Kind::Copy),
        ];
        WORDS.iter().find(|(n, _)| w.is(n)).map(|(_, k)| *k)
    }
}

/// What one pass over a statement found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub kind: Kind,
    /// The statement with its values folded to `?`.
    pub digest_text: String,
    /// xxh3 of the digest text.
    pub digest: u64,
    /// Tables named, as written (`schema.table` where qualified; unquoted words in lower
    /// case), each once, in order of appearance; names a WITH clause defines left out.
    pub tables: Vec<String>,
    /// More than one statement in the text.
    pub several: bool,
    /// Every statement kind the text holds: each statement's, and those inside it that
    /// run (a data-changing WITH clause, EXPLAIN ANALYZE, PREPARE ... AS).
    pub kinds: Vec<Kind>,
}

/// Words after which table names follow.
const TABLE_INTRO: [&str; 10] = [
    "from", "join", "update", "into", "table", "truncate", "using", "copy", "insert", "replace",
];

/// Words that cannot be a table's alias: the clause after a table reference.
const NOT_ALIAS: [&str; 46] = [
    "skip",
    "nowait",
    "of",
    "stdin",
    "stdout",
    "low_priority",
    "delayed",
    "high_priority",
    "duplicate",
    "key",
    "where",
    "join",
    "left",
    "right",
    "inner",
    "outer",
    "cross",
    "full",
    "natural",
    "straight_join",
    "on",
    "using",
    "group",
    "order",
    "limit",
    "having",
    "union",
    "except",
    "intersect",
    "set",
    "values",
    "value",
    "select",
    "window",
    "for",
    "lock",
    "offset",
    "fetch",
    "returning",
    "partition",
    "use",
    "force",
    "ignore",
    "default",
    "tablesample",
    "into",
];

/// Words skipped between an introducing word and the table name.
const SKIP: [&str; 10] = [
    "only",
    "if",
    "not",
    "exists",
    "lateral",
    "table",
    "low_priority",
    "delayed",
    "high_priority",
    "ignore",
];

/// What the word that introduced a table name allows after it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Mode {
    /// More names may follow, separated by commas (FROM a, b).
    list: bool,
    /// A name followed by `(` is a function, not a table (FROM generate_series(...)).
    call: bool,
}

/// Where the table-name reader stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    Nothing,
    /// Expecting a table name (after FROM, JOIN, ...).
    Name(Mode),
    /// Inside a qualified name: after `name.`.
    Dot(Mode),
    /// After a table name: `.`, an alias or a comma may follow.
    After(Mode),
    /// After a table's alias: a comma continues a FROM list.
    Alias(Mode),
}

/// What identifies a statement's shape: a hash of its digest text, its kind and
/// whether the text holds several statements ([`facts`] without the digest text, the
/// digest id and the tables; no allocation: the digest text is built in a buffer kept
/// per thread, and hashed once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// A 128-bit hash of the digest text, for caches that must not confuse two shapes
    /// (of its bytes as written: where the statement is not valid UTF-8, two keys may
    /// share one digest text, never one key two), seeded anew in every process.
    pub key: u128,
    pub kind: Kind,
    pub several: bool,
    /// The one-pass path made the digest: texts with the same [`values_key`] have the
    /// same shape.
    pub plain: bool,
}

/// The [`Shape`] of `sql`.
pub fn shape(sql: &[u8], dialect: Dialect) -> Shape {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|b| {
        let mut out = b.borrow_mut();
        out.clear();
        // Most statements take the one-pass path; the rest the token scanner.
        let quick = crate::quick::digest(sql, dialect, &mut out);
        let plain = quick.is_some();
        let (kind, several) = match quick {
            Some(found) => found,
            None => {
                out.clear();
                scan(sql, dialect, &mut out, None)
            }
        };
        let key = xxhash_rust::xxh3::xxh3_128_with_seed(&out, crate::quick::key_seed());
        if out.capacity() > 64 * 1024 {
            // One huge statement must not keep its buffer.
            *out = Vec::new();
        }
        Shape {
            key,
            kind,
            several,
            plain,
        }
    })
}

/// Scans `sql` once for its [`Facts`].
pub fn facts(sql: &[u8], dialect: Dialect) -> Facts {
    let mut text = Vec::new();
    let mut t = TableScan::default();
    let (kind, several) = scan(sql, dialect, &mut text, Some(&mut t));
    // The digest is built of bytes as written (words and quoted names are whole
    // runs of the text, each followed by ASCII or the end): invalid UTF-8 becomes
    // U+FFFD here as it would token by token.
    let digest_text = String::from_utf8(text)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    let mut kinds = std::mem::take(&mut t.kinds);
    if !kinds.contains(&kind) {
        kinds.insert(0, kind);
    }
    Facts {
        kind,
        digest: xxhash_rust::xxh3::xxh3_64(digest_text.as_bytes()),
        digest_text,
        tables: t.finish(),
        several,
        kinds,
    }
}

/// The token scanner's digest text (bytes), kind and several, for tests of the
/// one-pass path.
#[cfg(test)]
pub(crate) fn scanned(sql: &[u8], dialect: Dialect) -> (Vec<u8>, Kind, bool) {
    let mut out = Vec::new();
    let (kind, several) = scan(sql, dialect, &mut out, None);
    (out, kind, several)
}

/// The table-name reader's state (and the kinds of the statements inside).
struct TableScan {
    at: Option<At>,
    tables: Vec<String>,
    current: String,
    ctes: Vec<String>,
    prev_ident: Option<String>,
    kinds: Vec<Kind>,
    /// The next word may start a statement of its own (after `;`, `(`, AS, ANALYZE).
    opens: bool,
    /// The last word was FOR or KEY: an UPDATE after it names no table (FOR UPDATE,
    /// ON DUPLICATE KEY UPDATE).
    after_for: bool,
}

impl Default for TableScan {
    fn default() -> Self {
        TableScan {
            at: None,
            tables: Vec::new(),
            current: String::new(),
            ctes: Vec::new(),
            prev_ident: None,
            kinds: Vec::new(),
            opens: true,
            after_for: false,
        }
    }
}

impl TableScan {
    fn step(&mut self, t: &Token<'_>, cte_here: bool) {
        if std::mem::take(&mut self.opens)
            && let Some(k) = Kind::of_first_word(t)
            && !matches!(k, Kind::Select | Kind::Show)
            && !self.kinds.contains(&k)
        {
            self.kinds.push(k);
        }
        self.opens =
            matches!(t, Token::Punct(b'(')) || t.is("as") || t.is("analyze") || t.is("analyse");
        // A WITH clause's names (`name AS (` before the main statement starts).
        if t.is("as")
            && cte_here
            && let Some(p) = self.prev_ident.take()
        {
            self.ctes.push(p);
        }
        let after_for = std::mem::replace(&mut self.after_for, t.is("for") || t.is("key"));
        let at = self.at.unwrap_or(At::Nothing);
        self.at = Some(if after_for && t.is("update") {
            step_tables(at, &Token::Semicolon, &mut self.current, &mut self.tables)
        } else {
            step_tables(at, t, &mut self.current, &mut self.tables)
        });
        self.prev_ident = t.ident();
        if let Some(p) = &self.prev_ident
            && NOT_ALIAS.contains(&p.as_str())
        {
            self.prev_ident = None;
        }
    }

    fn finish(mut self) -> Vec<String> {
        if !self.current.is_empty() {
            self.tables.push(std::mem::take(&mut self.current));
        }
        let ctes = self.ctes;
        self.tables.retain(|t| !ctes.contains(t));
        let mut unique: Vec<String> = Vec::with_capacity(self.tables.len());
        for t in self.tables {
            if !unique.contains(&t) {
                unique.push(t);
            }
        }
        unique
    }
}

/// One pass: the digest text into `out`, the tables into `tables` when asked; returns
/// the kind and whether there were several statements.
fn scan(
    sql: &[u8],
    dialect: Dialect,
    out: &mut Vec<u8>,
    mut tables: Option<&mut TableScan>,
) -> (Kind, bool) {
    let mut d = Digest::new(dialect, out);
    let mut tokens = Tokens::new_in(sql, dialect);
    let mut kind: Option<Kind> = None;
    let mut with = false;
    let mut depth = 0usize;
    let mut statements = 0usize;
    let mut pending_end = false;
    while let Some((t, span)) = tokens.next_spanned() {
        if t == Token::Semicolon {
            pending_end = true;
            if let Some(ts) = tables.as_deref_mut() {
                ts.at = Some(At::Nothing);
                ts.opens = true;
            }
            continue;
        }
        if pending_end || statements == 0 {
            statements += 1;
            if pending_end {
                d.push_semicolon();
            }
            pending_end = false;
        }
        d.push(t, span);
        match t {
            Token::Punct(b'(') => depth += 1,
            Token::Punct(b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if kind.is_none() && statements == 1 {
            if t.is("with") {
                with = true;
            } else if !with || depth == 0 {
                kind = Kind::of_first_word(&t).or(if with { None } else { Some(Kind::Other) });
            }
        }
        if let Some(ts) = tables.as_deref_mut() {
            ts.step(&t, with && kind.is_none() && depth == 0);
        }
    }
    (kind.unwrap_or(Kind::Other), statements > 1)
}

/// One token's effect on the table-name reader.
fn step_tables(at: At, t: &Token<'_>, current: &mut String, tables: &mut Vec<String>) -> At {
    let intro = TABLE_INTRO.iter().any(|w| t.is(w));
    let flush = |current: &mut String, tables: &mut Vec<String>| {
        if !current.is_empty() {
            tables.push(std::mem::take(current));
        }
    };
    match at {
        At::Name(m) => {
            if SKIP.iter().any(|w| t.is(w)) {
                return at;
            }
            if intro {
                // INSERT INTO t, COPY TABLE: the later word says what follows.
                return At::Name(mode(t));
            }
            match t.ident() {
                Some(name)
                    if !NOT_ALIAS.contains(&name.as_str()) || matches!(t, Token::Quoted(_)) =>
                {
                    current.push_str(&name);
                    At::After(m)
                }
                _ => At::Nothing,
            }
        }
        At::Dot(m) => match t.ident() {
            Some(name) => {
                current.push_str(&name);
                At::After(m)
            }
            None => {
                current.clear();
                At::Nothing
            }
        },
        At::After(m) if *t == Token::Punct(b'.') => {
            current.push('.');
            At::Dot(m)
        }
        At::After(m) if m.call && *t == Token::Punct(b'(') => {
            // A function in FROM: not a table.
            current.clear();
            At::Nothing
        }
        At::After(m) | At::Alias(m) => {
            flush(current, tables);
            if *t == Token::Punct(b',') && m.list {
                return At::Name(m);
            }
            if intro {
                return At::Name(mode(t));
            }
            if matches!(at, At::After(_)) && (t.is("as") || alias(t)) {
                return if t.is("as") {
                    At::After(m)
                } else {
                    At::Alias(m)
                };
            }
            At::Nothing
        }
        At::Nothing if intro => At::Name(mode(t)),
        At::Nothing => At::Nothing,
    }
}

/// What the introducing word `t` allows.
fn mode(t: &Token<'_>) -> Mode {
    Mode {
        list: !(t.is("into") || t.is("join")),
        call: t.is("from") || t.is("join"),
    }
}

fn alias(t: &Token<'_>) -> bool {
    match t {
        Token::Quoted(_) => true,
        Token::Word(_) => t.ident().is_some_and(|w| !NOT_ALIAS.contains(&w.as_str())),
        _ => false,
    }
}

/// Builds the digest text.
struct Digest<'o> {
    /// The digest text as bytes (`shape` hashes them without checking UTF-8).
    out: &'o mut Vec<u8>,
    dialect: Dialect,
    /// End of the previous token in the text, to keep operators like `<=` whole.
    last_end: usize,
    last: Option<u8>,
    /// Inside `IN (`: the output length at the `(`, and whether only values came since.
    in_list: Option<(usize, bool)>,
    after_in: bool,
}

impl<'o> Digest<'o> {
    fn new(dialect: Dialect, out: &'o mut Vec<u8>) -> Self {
        Digest {
            out,
            dialect,
            last_end: usize::MAX,
            last: None,
            in_list: None,
            after_in: false,
        }
    }

    fn push_semicolon(&mut self) {
        self.out.push(b';');
        self.last = Some(b';');
        self.in_list = None;
        self.after_in = false;
    }

    fn push(&mut self, t: Token<'_>, span: std::ops::Range<usize>) {
        let adjacent = span.start == self.last_end;
        self.last_end = span.end;
        let value = matches!(t, Token::Str(_) | Token::Number(_))
            || t == Token::Punct(b'?')
            || (t == Token::Punct(b'$') && span.len() > 1);
        let punct = match t {
            Token::Punct(c) if !value => Some(c),
            _ => None,
        };
        // `IN (a, b, c)` becomes `IN (?)`.
        if let Some((_, only_values)) = self.in_list.as_mut() {
            match punct {
                Some(b',') => return,
                Some(b')') => {
                    let (start, only_values) = self.in_list.take().unwrap_or_default();
                    if only_values {
                        self.out.truncate(start);
                        self.out.extend_from_slice(b"?)");
                        self.last = Some(b')');
                        return;
                    }
                }
                _ if value => {}
                _ => *only_values = false,
            }
        }
        let open_in = self.after_in && punct == Some(b'(');
        self.after_in = t.is("in");
        let space = match (self.last, punct) {
            (None, _) => false,
            (_, Some(b',' | b')' | b'.' | b';')) => false,
            (Some(b'(' | b'.'), _) => false,
            (Some(p), Some(_)) if adjacent && !matches!(p, b'w' | b',' | b';' | b')') => false,
            (Some(b'@'), _) => false,
            // A function call as written: `f(`.
            (Some(b'w'), Some(b'(')) if adjacent => false,
            _ => true,
        };
        if space {
            self.out.push(b' ');
        }
        match t {
            _ if value => self.out.push(b'?'),
            Token::Word(w) => self.out.extend_from_slice(w),
            Token::Quoted(q) => {
                let quote = if self.dialect == Dialect::MySql {
                    b'`'
                } else {
                    b'"'
                };
                self.out.push(quote);
                self.out.extend_from_slice(q);
                self.out.push(quote);
            }
            Token::Punct(c) => self.out.push(c),
            Token::Str(_) | Token::Number(_) | Token::Semicolon => {}
        }
        if open_in {
            self.in_list = Some((self.out.len(), true));
        }
        self.last = match t {
            Token::Punct(c) if !value => Some(c),
            _ => Some(b'w'),
        };
    }
}

#[cfg(test)]
#[path = "facts_tests.rs"]
mod tests;
