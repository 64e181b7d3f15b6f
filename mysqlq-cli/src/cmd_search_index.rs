//! `search-index add | list | drop PATH`: declared search fields (`Admin::add_search_field`,
//! `search_fields`, `drop_search_field`): a payload or meta path searched often gets an
//! indexed VIRTUAL column, which `jobs search` and the dashboard then walk instead of reading
//! every row.

use clap::{Args, Subcommand};
use mysqlq::admin::SearchField;

use crate::args::Acting;
use crate::confirm;
use crate::db::Target;
use crate::error::CliError;
use crate::out::Table;

/// `search-index`.
#[derive(Debug, Args)]
pub(crate) struct SearchIndexArgs {
    #[command(subcommand)]
    pub(crate) command: SearchIndexCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SearchIndexCommand {
    /// Declare a search field: add a VIRTUAL column holding the path's text (its first 191
    /// characters) and an index on it to job_queue (online where the server can), so that
    /// searches such as args.order_id:42 read that index instead of every row. Each field
    /// costs an index update on every insert and delete of a job. Run it again to finish a
    /// declaration that failed half way.
    Add(PathArgs),
    /// List the declared search fields, their columns and indexes.
    List(ListArgs),
    /// Forget a declared search field (searches stop using it at once), then drop its index
    /// and column.
    Drop(PathArgs),
}

/// `search-index add | drop`.
#[derive(Debug, Args)]
pub(crate) struct PathArgs {
    /// The field: args.PATH (the job's arguments) or meta.PATH (its meta), segments of A-Z a-z
    /// 0-9 _ - joined by dots, e.g. args.order_id, meta.tenant, args.items.0.sku
    #[arg(value_name = "PATH")]
    pub(crate) path: String,
    #[command(flatten)]
    pub(crate) acting: Acting,
}

/// `search-index list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Print JSON
    #[arg(long)]
    pub(crate) json: bool,
}

/// An error of the library about the path: its reason's problem and fix; others as usual.
fn path_error(what: &str, e: &mysqlq::Error) -> CliError {
    match e {
        mysqlq::Error::Invalid { reason, .. } => match reason.rsplit_once("; ") {
            Some((problem, fix)) => CliError::usage(format!("{what}: {problem}"), fix),
            None => CliError::usage(
                format!("{what}: {reason}"),
                "`mysqlq-cli search-index list` shows the declared fields",
            ),
        },
        mysqlq::Error::Database(_) if e.server_code() == Some(1205) => CliError::new(
            format!("{what}: job_queue stayed locked by another transaction for 10 s"),
            "try again when no long transaction holds job_queue (SHOW PROCESSLIST)",
        ),
        _ => CliError::mysqlq(what, e),
    }
}

/// Runs a `search-index` subcommand; returns the exit code.
pub(crate) async fn search_index(target: &Target, a: SearchIndexArgs) -> Result<u8, CliError> {
    match a.command {
        SearchIndexCommand::Add(p) => {
            let admin = confirm::admin(target.pool(1).await?, &p.acting);
            let what = "cannot declare a search field";
            let r = admin
                .add_search_field(&p.path)
                .await
                .map_err(|e| path_error(what, &e))?;
            let f = &r.field;
            if r.was_declared && !r.created_column && !r.created_index {
                println!(
                    "{} is declared already: column {}, index {}",
                    f.path, f.column, f.index
                );
            } else {
                println!(
                    "declared {}: column {} (VIRTUAL), index {}; searches on {}:<text> read \
                     the index now",
                    f.path, f.column, f.index, f.path
                );
            }
            Ok(0)
        }
        SearchIndexCommand::List(l) => {
            let admin = mysqlq::admin::Admin::new(target.pool(1).await?);
            let fields = admin
                .search_fields()
                .await
                .map_err(|e| CliError::mysqlq("cannot list the search fields", &e))?;
            if l.json {
                let text = serde_json::to_string_pretty(&fields).map_err(|e| {
                    CliError::new(format!("cannot encode JSON: {e}"), "report this bug")
                })?;
                println!("{text}");
            } else if fields.is_empty() {
                println!(
                    "{}",
                    crate::program::rename(
                        "no declared search fields (`mysqlq-cli search-index add args.order_id` \
                         declares one)"
                    )
                );
            } else {
                print!("{}", table(&fields).render());
            }
            Ok(0)
        }
        SearchIndexCommand::Drop(p) => {
            let admin = confirm::admin(target.pool(1).await?, &p.acting);
            let what = "cannot drop a search field";
            let f = admin
                .drop_search_field(&p.path)
                .await
                .map_err(|e| path_error(what, &e))?;
            println!(
                "dropped {}: index {} and column {} removed",
                f.path, f.index, f.column
            );
            Ok(0)
        }
    }
}

fn table(fields: &[SearchField]) -> Table {
    let mut t = Table::new(&["PATH", "COLUMN", "INDEX", "DECLARED (UTC)", "STATE"]);
    for f in fields {
        let state = match (f.column_exists, f.index_exists) {
            (true, true) => "ok",
            (false, _) => "column missing: add it again",
            (true, false) => "index missing: add it again",
        };
        t.row(vec![
            f.path.clone(),
            f.column.clone(),
            f.index.clone(),
            f.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            state.to_owned(),
        ]);
    }
    t
}
