//! A console answer: named, typed columns and rows, which each protocol's console
//! encodes as an ordinary result set. `ORDER BY` and `LIMIT` are applied here, once for
//! every `SHOW`.

use std::cmp::Ordering;

/// A column's type, as the result set announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int,
    Float,
    Text,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Int(i64),
    Float(f64),
    Text(String),
    Null,
}

impl Cell {
    /// The cell in text format (None for NULL).
    pub fn text(&self) -> Option<String> {
        match self {
            Cell::Int(i) => Some(i.to_string()),
            Cell::Float(f) => Some(format!("{f:.3}")),
            Cell::Text(t) => Some(t.clone()),
            Cell::Null => None,
        }
    }

    fn cmp(&self, other: &Cell) -> Ordering {
        match (self, other) {
            (Cell::Null, Cell::Null) => Ordering::Equal,
            (Cell::Null, _) => Ordering::Less,
            (_, Cell::Null) => Ordering::Greater,
            (Cell::Int(a), Cell::Int(b)) => a.cmp(b),
            (Cell::Text(a), Cell::Text(b)) => a.cmp(b),
            (a, b) => a.number().total_cmp(&b.number()),
        }
    }

    fn number(&self) -> f64 {
        match self {
            Cell::Int(i) => *i as f64,
            Cell::Float(f) => *f,
            Cell::Text(t) => t.parse().unwrap_or(f64::NAN),
            Cell::Null => f64::NEG_INFINITY,
        }
    }
}

impl From<u64> for Cell {
    fn from(v: u64) -> Cell {
        Cell::Int(v.min(i64::MAX as u64) as i64)
    }
}

impl From<usize> for Cell {
    fn from(v: usize) -> Cell {
        Cell::from(v as u64)
    }
}

impl From<i64> for Cell {
    fn from(v: i64) -> Cell {
        Cell::Int(v)
    }
}

impl From<f64> for Cell {
    fn from(v: f64) -> Cell {
        Cell::Float(v)
    }
}

impl From<&str> for Cell {
    fn from(v: &str) -> Cell {
        Cell::Text(v.to_owned())
    }
}

impl From<String> for Cell {
    fn from(v: String) -> Cell {
        Cell::Text(v)
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Null, Into::into)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub columns: Vec<(&'static str, Type)>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, Type)]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    fn column(&self, name: &str) -> Result<usize, String> {
        self.columns
            .iter()
            .position(|(c, _)| c.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<&str> = self.columns.iter().map(|(c, _)| *c).collect();
                format!("no column \"{name}\"; columns: {}", names.join(", "))
            })
    }

    /// Applies `ORDER BY` (column, descending) keys and `LIMIT`.
    pub fn shape(
        mut self,
        order: &[(String, bool)],
        limit: Option<usize>,
    ) -> Result<Table, String> {
        let keys = order
            .iter()
            .map(|(c, desc)| Ok((self.column(c)?, *desc)))
            .collect::<Result<Vec<_>, String>>()?;
        if !keys.is_empty() {
            self.rows.sort_by(|a, b| {
                for (i, desc) in &keys {
                    let o = a[*i].cmp(&b[*i]);
                    let o = if *desc { o.reverse() } else { o };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            });
        }
        if let Some(n) = limit {
            self.rows.truncate(n);
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_limit() {
        let mut t = Table::new(&[("name", Type::Text), ("n", Type::Int)]);
        for (name, n) in [("a", 3), ("b", 10), ("c", 1)] {
            t.push(vec![name.into(), Cell::Int(n)]);
        }
        let s = t
            .clone()
            .shape(&[("N".into(), true)], Some(2))
            .unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = s.rows.iter().map(|r| r[0].text()).collect();
        assert_eq!(names, vec![Some("b".into()), Some("a".into())]);
        let e = t
            .shape(&[("x".into(), false)], None)
            .expect_err("no such column");
        assert!(e.contains("columns: name, n"), "{e}");
    }
}
