package store

type migration struct {
	version int
	name    string
	sql     string
}

func migrations(backend string) ([]migration, error) { return nil, nil }
