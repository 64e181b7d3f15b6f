//! Text output: aligned columns.

/// Columns printed aligned; a header starting with `>` is right-aligned (the `>` not printed).
pub(crate) struct Table {
    headers: Vec<(String, bool)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(headers: &[&str]) -> Self {
        let headers = headers
            .iter()
            .map(|h| {
                h.strip_prefix('>')
                    .map_or(((*h).to_owned(), false), |r| (r.to_owned(), true))
            })
            .collect();
        Self {
            headers,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn render(&self) -> String {
        let header: Vec<String> = self.headers.iter().map(|(h, _)| h.clone()).collect();
        let all: Vec<&Vec<String>> = std::iter::once(&header).chain(&self.rows).collect();
        let width = |i: usize| {
            all.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.headers.len()).map(width).collect();
        let mut out = String::new();
        for r in all {
            let cells: Vec<String> = widths
                .iter()
                .zip(&self.headers)
                .enumerate()
                .map(|(i, (w, (_, right)))| {
                    let c = r.get(i).map_or("", String::as_str);
                    if *right {
                        format!("{c:>w$}")
                    } else {
                        format!("{c:<w$}")
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["METRIC", ">VALUE"]);
        t.row(vec!["drain".into(), "5".into()]);
        t.row(vec!["d".into(), "12345".into()]);
        assert_eq!(t.render(), "METRIC  VALUE\ndrain       5\nd       12345\n");
    }
}
