// Package layout holds no code: its test pins the direction of gantry's
// imports (which package may reach which), so the layout cannot drift back.
package layout
