"""One command per paper table: the tables (``tables``), the papers' numbers
(``paper_numbers.yaml``, matched to each run's setting by ``paper``), the cells of a table
(``cells``), their jobs (``jobs``), the dry run's plan and estimates (``planning``, ``gpu_hours``),
the markdown table (``report``) and the campaign that runs them (``campaign``)."""
