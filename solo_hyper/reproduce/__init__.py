"""One command per paper table: the tables (``tables``), the papers' numbers
(``paper_numbers.yaml``, matched to each run's setting by ``paper``) and the campaign that trains,
evaluates and tabulates them (``campaign``)."""
