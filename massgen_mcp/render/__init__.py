"""A record for people: the HTML report and live pages (:mod:`.html`), the terminal's
progress lines and tables (:mod:`.text`) and the eval's summary page (:mod:`.eval_report`).
Pure functions from records to text."""
