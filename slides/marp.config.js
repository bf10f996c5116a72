// Marp's settings for the decks (scripts/slides.sh passes this file): a line break in the
// Markdown is a space, as in any Markdown — the decks' lines are wrapped at 100 columns.
module.exports = {
  options: { markdown: { breaks: false } },
};
