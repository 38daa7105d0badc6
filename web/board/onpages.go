package board

// onPages is a table as the frames leave it on the pages, for while the
// board's table is ahead of it: a caller over its share (or busy mode)
// changes the board's rows with no frame of their own, and the frame that
// later draws them (keyOps, chargeOps) changes the pages' table a row at a
// time from what it notes here. Row is what a table's ops compare: the
// whole row for the key table (its status, code and hits change in
// place), the id for the charges table (a charge never changes).
type onPages[Row any] struct {
	// ahead says the board's rows changed with no frame to say so.
	ahead bool
	// known says shown is the pages' table; false when a page may have
	// another (one was drawn from the model while ahead), so that the next
	// frame draws the table whole.
	known bool
	shown []Row // in the table's order, while ahead and known
}

// quiet notes, before a change of the rows that no frame draws, the table
// as the pages have it: rows is called only when the pages had the
// board's table until now. The board's mu is held.
func (s *onPages[Row]) quiet(rows func() []Row) {
	if s.ahead {
		return
	}
	*s = onPages[Row]{ahead: true, known: true, shown: rows()}
}

// drawn notes that a frame draws the whole table: the pages have the
// board's.
func (s *onPages[Row]) drawn() { *s = onPages[Row]{} }

// unknown notes that a page is drawn from the model: if the board is
// ahead of the frames, that page has rows the others do not, and the
// next frame draws the table whole for every page alike.
func (s *onPages[Row]) unknown() {
	if s.ahead {
		s.known, s.shown = false, nil
	}
}
