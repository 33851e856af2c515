//! `sluice-bench report`: results documents rendered as markdown tables and SVG charts.
//!
//! [`render`] groups each document's runs by (table, connection count, target), takes
//! medians over the rounds that had no error (`group.rs`), and writes one markdown
//! document (`markdown.rs`) with two charts per table (`charts.rs`): throughput against
//! connection count, and latency percentiles at the largest connection count measured.
//! A failover document's rounds get tables of their own (`failover.rs`), no charts.
//! The output depends on nothing but its input: rendering twice gives the same bytes.

mod charts;
mod failover;
mod group;
mod markdown;
mod storm;
mod svg;
mod text;

#[cfg(test)]
mod tests;

use crate::results::{Results, RunRecord, TableInfo};
use group::GroupStats;
use std::collections::{BTreeMap, HashMap};

/// How the report is laid out.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// How the markdown links a chart: this prefix plus the chart's file name
    /// ("bench/" gives `![..](bench/pg-ping-throughput.svg)`).
    pub svg_link_prefix: String,
    /// The command line that produced the report, printed in its header.
    pub command: String,
    /// Hand-written markdown placed after the header (a summary, what the numbers mean).
    pub preface: String,
}

/// A rendered report: the markdown and the charts it links (file name, SVG text).
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    pub markdown: String,
    pub charts: Vec<(String, String)>,
}

/// Renders `docs` (in the order given) as one markdown document and its charts.
///
/// Fails when there is no document, when a document has two tables with the same id,
/// when a table id is not usable in a file name, or when two documents would write
/// charts of the same name.
pub fn render(docs: &[Results], opts: &ReportOptions) -> anyhow::Result<Rendered> {
    if docs.is_empty() {
        anyhow::bail!("no results documents to report on");
    }
    let mut views = Vec::with_capacity(docs.len());
    let mut chart_owner: HashMap<&str, &str> = HashMap::new();
    for doc in docs {
        let view = DocView::new(doc)?;
        for t in &view.tables {
            if let Some(other) = chart_owner.insert(&t.info.id, &doc.title) {
                anyhow::bail!(
                    "table id {:?} appears in two results documents ({other:?} and {:?}); \
                     their charts would have the same file names",
                    t.info.id,
                    doc.title
                );
            }
        }
        views.push(view);
    }
    let mut charts = Vec::new();
    for view in &views {
        for t in &view.tables {
            charts.push((throughput_chart_name(t.info), charts::throughput(view, t)));
            charts.push((latency_chart_name(t.info), charts::latency(view, t)));
        }
    }
    Ok(Rendered {
        markdown: markdown::render(&views, opts),
        charts,
    })
}

/// File name of a table's throughput chart.
fn throughput_chart_name(t: &TableInfo) -> String {
    format!("{}-throughput.svg", t.id)
}

/// File name of a table's latency chart.
fn latency_chart_name(t: &TableInfo) -> String {
    format!("{}-latency.svg", t.id)
}

/// A table id makes file names: letters, digits, `-`, `_` and `.`, not starting with
/// `.`.
fn check_table_id(doc: &Results, id: &str) -> anyhow::Result<()> {
    let usable = !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !usable {
        anyhow::bail!(
            "results document {:?}: table id {id:?} cannot name a chart file \
             (use letters, digits, '-', '_' and '.')",
            doc.title
        );
    }
    Ok(())
}

/// One group of runs: one table, one connection count, one target.
#[derive(Debug)]
struct Group<'a> {
    /// The rounds, in the order they ran.
    pub runs: Vec<&'a RunRecord>,
    pub stats: GroupStats,
}

/// One table of a document with its runs grouped.
#[derive(Debug)]
struct TableView<'a> {
    pub info: &'a TableInfo,
    /// The table's connection counts in order, each once.
    pub connections: Vec<usize>,
    /// `groups[c][t]`: the runs at `connections[c]` of target `t` of the document.
    pub groups: Vec<Vec<Option<Group<'a>>>>,
}

impl TableView<'_> {
    /// The group at connection index `c` of target index `t`.
    pub fn group(&self, c: usize, t: usize) -> Option<&Group<'_>> {
        self.groups.get(c)?.get(t)?.as_ref()
    }
}

/// One document with its runs grouped.
#[derive(Debug)]
struct DocView<'a> {
    pub doc: &'a Results,
    /// Target names in the document's order, each once; the index picks the colour.
    pub targets: Vec<&'a str>,
    pub tables: Vec<TableView<'a>>,
    /// Runs naming a table, target or connection count the document does not list.
    pub unmatched: usize,
}

impl<'a> DocView<'a> {
    fn new(doc: &'a Results) -> anyhow::Result<DocView<'a>> {
        let mut targets: Vec<&str> = Vec::new();
        for t in &doc.targets {
            if !targets.contains(&t.as_str()) {
                targets.push(t);
            }
        }
        let target_index: HashMap<&str, usize> =
            targets.iter().enumerate().map(|(i, t)| (*t, i)).collect();

        let mut table_index: HashMap<&str, usize> = HashMap::new();
        let mut tables = Vec::with_capacity(doc.tables.len());
        for (i, info) in doc.tables.iter().enumerate() {
            if table_index.insert(&info.id, i).is_some() {
                anyhow::bail!(
                    "results document {:?} has two tables with the id {:?}",
                    doc.title,
                    info.id
                );
            }
            check_table_id(doc, &info.id)?;
            let mut connections = Vec::new();
            for &c in &info.connections {
                if !connections.contains(&c) {
                    connections.push(c);
                }
            }
            tables.push((info, connections));
        }

        let mut grouped: BTreeMap<(usize, usize, usize), Vec<&RunRecord>> = BTreeMap::new();
        let mut unmatched = 0;
        for run in &doc.runs {
            let key = table_index.get(run.table.as_str()).and_then(|&ti| {
                let ci = tables[ti].1.iter().position(|&c| c == run.connections)?;
                let ri = *target_index.get(run.target.as_str())?;
                Some((ti, ci, ri))
            });
            match key {
                Some(k) => grouped.entry(k).or_default().push(run),
                None => unmatched += 1,
            }
        }

        let tables = tables
            .into_iter()
            .enumerate()
            .map(|(ti, (info, connections))| {
                let groups = (0..connections.len())
                    .map(|ci| {
                        (0..targets.len())
                            .map(|ri| {
                                let runs = grouped.remove(&(ti, ci, ri))?;
                                let stats = GroupStats::of(&runs);
                                Some(Group { runs, stats })
                            })
                            .collect()
                    })
                    .collect();
                TableView {
                    info,
                    connections,
                    groups,
                }
            })
            .collect();
        Ok(DocView {
            doc,
            targets,
            tables,
            unmatched,
        })
    }
}
