// A page restored by the back button (the back-forward cache, or the browser's own memory of
// form fields) would show the filters as last touched, not as its URL says: the markup's own
// values are the URL's, so resetting every form to them makes the page agree with its URL.
window.addEventListener("pageshow", function () {
  for (const form of document.forms) {
    form.reset();
  }
});
