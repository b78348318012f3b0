"""A record for people: the HTML report and live pages (:mod:`.html`), the terminal's
progress lines and tables (:mod:`.text`). Pure functions from records to text."""
