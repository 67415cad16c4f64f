"""SQL views and named queries, one documented .sql file each (filled by later issues)."""
